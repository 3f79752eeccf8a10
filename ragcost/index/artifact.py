"""A built index on disk: index file, vectors, labels and a manifest written last (the commit point)."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from ragcost.config.index import IndexConfig
from ragcost.errors import FingerprintError
from ragcost.index.base import VectorIndex, index_registry

MANIFEST = "manifest.json"
# Files a build owns; anything matching these and not named by the manifest is an older build's.
_BUILD_FILE = re.compile(r"^(index|vectors|labels)-[0-9a-f]+\.(faiss|hnsw|npy)$|^\..*\.tmp$")


class Manifest(BaseModel):
    """What an index artifact holds and what made it."""

    fingerprint: dict[str, Any] = Field(description="what made it: model hash, dim, precision, build, corpus")
    vector_count: int
    dim: int
    precision: str
    backend: str
    kind: str
    index_bytes: int = Field(description="bytes the index holds in memory")
    bytes_per_vector: float = Field(description="index_bytes / vector_count")
    file_bytes: int = Field(description="bytes on disk of this build's index, vectors and labels files")
    index_file: str
    vectors_file: str
    labels_file: str
    build_seconds: float
    created_at: str = Field(description="ISO 8601, UTC")
    warnings: list[str] = Field(default_factory=list)


@dataclass
class LoadedIndex:
    """An opened artifact; ``vectors`` is memory-mapped read-only (pages load on first touch)."""

    index: VectorIndex
    labels: np.ndarray
    vectors: np.ndarray
    manifest: Manifest


def build_index(
    config: IndexConfig, vectors: np.ndarray, labels: np.ndarray, precision: str = "float32"
) -> VectorIndex:
    """Build the registered backend's index over vectors and labels (sorted by label first)."""
    vectors, labels = _sorted_by_label(vectors, labels)
    index = index_registry.get(config.backend)(config, dim=vectors.shape[1], precision=precision)
    index.build(vectors, labels)
    return index


def _sorted_by_label(vectors: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    labels = np.asarray(labels, dtype=np.int64)
    order = np.argsort(labels, kind="stable")
    return np.ascontiguousarray(np.asarray(vectors, dtype=np.float32)[order]), labels[order]


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _commit(tmp: Path, final: Path) -> None:
    """fsync a finished temp file, then rename it into place atomically."""
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)


def _write_npy(directory: Path, name: str, array: np.ndarray) -> None:
    tmp = directory / f".{name}.tmp"
    with open(tmp, "wb") as f:
        np.save(f, array)
    _commit(tmp, directory / name)


def write_artifact(
    directory: Path | str,
    index: VectorIndex,
    labels: np.ndarray,
    vectors: np.ndarray,
    fingerprint: dict[str, Any],
    build_seconds: float,
) -> Manifest:
    """Write a built index with its vectors and labels; the manifest rename commits it, then old builds go."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vectors, labels = _sorted_by_label(vectors, labels)
    build_id = uuid.uuid4().hex[:16]  # unique names: a new build never overwrites a live one's files
    ext = "faiss" if index.backend == "faiss" else "hnsw"
    names = {
        "index": f"index-{build_id}.{ext}",
        "vectors": f"vectors-{build_id}.npy",
        "labels": f"labels-{build_id}.npy",
    }

    tmp_index = directory / f".{names['index']}.tmp"
    index.save(tmp_index)
    _commit(tmp_index, directory / names["index"])
    _write_npy(directory, names["vectors"], vectors)
    _write_npy(directory, names["labels"], labels)
    _fsync_dir(directory)

    n = len(labels)
    index_bytes = int(index.nbytes())
    manifest = Manifest(
        fingerprint=_jsonable(fingerprint),
        vector_count=n,
        dim=int(vectors.shape[1]) if vectors.ndim == 2 else index.dim,
        precision=index.precision,
        backend=index.backend,
        kind=index.config.kind,
        index_bytes=index_bytes,
        bytes_per_vector=round(index_bytes / n, 3) if n else 0.0,
        file_bytes=sum((directory / f).stat().st_size for f in names.values()),
        index_file=names["index"],
        vectors_file=names["vectors"],
        labels_file=names["labels"],
        build_seconds=float(build_seconds),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        warnings=list(index.warnings),
    )
    tmp = directory / f".{MANIFEST}.{build_id}.tmp"
    tmp.write_text(manifest.model_dump_json(indent=2))
    _commit(tmp, directory / MANIFEST)  # the commit point: before it the old build is live, after it the new one
    _fsync_dir(directory)
    _remove_unreferenced(directory, set(names.values()))
    return manifest


def _remove_unreferenced(directory: Path, keep: set[str]) -> None:
    for path in directory.iterdir():
        if path.name not in keep and _BUILD_FILE.match(path.name):
            try:
                path.unlink()
            except FileNotFoundError:  # a concurrent cleanup got there first
                pass


def _jsonable(value: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint as it will read back from JSON, so comparisons see the same types."""
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def read_manifest(directory: Path | str) -> Manifest | None:
    """The committed manifest in ``directory``, or None when there is none."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    return Manifest.model_validate_json(path.read_text())


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _short(value: Any) -> str:
    if value is _MISSING:
        return "(none)"
    text = str(value)
    # Hashes are long and only their start tells two apart for a human.
    if re.fullmatch(r"[0-9a-fA-F]{16,}", text) or (len(text) > 40 and " " not in text):
        return text[:12]
    return text


_MISSING = object()


def fingerprint_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for every key whose value differs (nested keys dotted)."""
    a, b = _flatten(_jsonable(old)), _flatten(_jsonable(new))
    changes = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, _MISSING), b.get(key, _MISSING)
        if va != vb:
            changes.append(f"{key}: {_short(va)} -> {_short(vb)}")
    return changes


def check_fingerprint(manifest: Manifest, expected: dict[str, Any], rebuild_hint: str) -> None:
    """Raise FingerprintError naming every changed key when the artifact was made by something else."""
    changes = fingerprint_changes(manifest.fingerprint, expected)
    if changes:
        raise FingerprintError(f"index was built for something else ({'; '.join(changes)}); {rebuild_hint}")


def open_artifact(
    directory: Path | str,
    config: IndexConfig,
    expected_fingerprint: dict[str, Any],
    rebuild_hint: str,
) -> LoadedIndex:
    """Open a committed artifact after checking its fingerprint and that it matches ``config``."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest is None:
        raise FingerprintError(f"no index at {directory}; {rebuild_hint}")
    check_fingerprint(manifest, expected_fingerprint, rebuild_hint)
    built = {"backend": manifest.backend, "kind": manifest.kind}
    wanted = {"backend": config.backend, "kind": config.kind}
    if built != wanted:
        changes = "; ".join(fingerprint_changes(built, wanted))
        raise FingerprintError(f"index at {directory} differs from its config ({changes}); {rebuild_hint}")
    index = index_registry.get(config.backend)(config, dim=manifest.dim, precision=manifest.precision)
    index.load(directory / manifest.index_file)
    index.warnings = list(manifest.warnings)
    labels = np.load(directory / manifest.labels_file)
    vectors = np.load(directory / manifest.vectors_file, mmap_mode="r")
    return LoadedIndex(index=index, labels=labels, vectors=vectors, manifest=manifest)


def timed_build(
    config: IndexConfig, vectors: np.ndarray, labels: np.ndarray, precision: str = "float32"
) -> tuple[VectorIndex, float]:
    """Build and return the wall seconds it took (for the manifest; the runner times queries)."""
    start = time.perf_counter()
    index = build_index(config, vectors, labels, precision)
    return index, time.perf_counter() - start
