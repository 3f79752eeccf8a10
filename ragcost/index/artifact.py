"""A built index on disk: index file, vectors, labels and a manifest written last (the commit point).

Files are written with ``ragcost.atomic.write_files``: temp names, fsync, rename, the manifest
last. Each build's files carry a fresh build id, so a new build never overwrites a live one's;
after the commit the previous build's files -- and only files named as a build names them -- go.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ragcost.atomic import disk_error, temp_target, write_files
from ragcost.config.index import IndexConfig
from ragcost.errors import FingerprintError, StoreError
from ragcost.index.base import VectorIndex
from ragcost.index.manifest import (
    FORMAT,
    MANIFEST,
    Manifest,
    check_fingerprint,
    fingerprint_changes,
    jsonable,
    load_manifest,
)
from ragcost.index.sharded import ShardedIndex, new_index, sorted_by_label
from ragcost.index.verify import file_record, remember_verified, stamp, verify_files

# The names a build writes (the index file's suffix is its backend's); nothing else is ever deleted.
_BUILD_FILE = re.compile(r"^(index-[0-9a-f]{16}\.[A-Za-z0-9_]+|(vectors|labels)-[0-9a-f]{16}\.npy)$")


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
    """Build the registered backend's index (in ``config.shards`` shards when > 1) over vectors and labels
    (sorted by label first)."""
    vectors, labels = sorted_by_label(vectors, labels)
    index = new_index(config, dim=vectors.shape[1], precision=precision)
    index.build(vectors, labels)
    return index


def timed_build(
    config: IndexConfig, vectors: np.ndarray, labels: np.ndarray, precision: str = "float32"
) -> tuple[VectorIndex, float]:
    """Build and return the wall seconds it took (for the manifest; the runner times queries)."""
    start = time.perf_counter()
    index = build_index(config, vectors, labels, precision)
    return index, time.perf_counter() - start


def _npy_writer(array: np.ndarray):
    def write(path: Path) -> None:
        with open(path, "wb") as f:  # a file object: np.save(path) would append ".npy" to the temp name
            np.save(f, array)
    return write


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
    vectors, labels = sorted_by_label(vectors, labels)
    build_id = uuid.uuid4().hex[:16]  # unique names: a new build never overwrites a live one's files
    names = {"index": f"index-{build_id}.{type(index).suffix}", "vectors": f"vectors-{build_id}.npy",
             "labels": f"labels-{build_id}.npy"}
    existed = directory.is_dir()
    try:
        write_files(directory, {names["index"]: index.save, names["vectors"]: _npy_writer(vectors),
                                names["labels"]: _npy_writer(labels)})
        files = {name: file_record(directory / name) for name in names.values()}
        manifest = _manifest(index, labels, vectors, fingerprint, build_seconds, names, files)
        # The commit point: before the manifest's rename the old build is live, after it the new one.
        write_files(directory, {}, commit=(MANIFEST, lambda p: p.write_text(manifest.model_dump_json(indent=2))))
    except BaseException as e:
        _forget_build(directory, build_id, set(names.values()), existed)
        fix = disk_error(e, with_path=False) or _full_disk(directory, e)
        if fix is None:
            raise
        raise StoreError(f"index {directory}: writing the built index failed: {fix}; nothing of this build was "
                         "kept (the index that was live is unchanged)") from e
    remember_verified(directory, {name: stamp(directory / name, rec) for name, rec in files.items()})
    _remove_unreferenced(directory, set(names.values()))
    return manifest


def _full_disk(directory: Path, e: BaseException) -> Optional[str]:
    """The disk-full fix when a backend's own writer (faiss's C++ fwrite) failed without an errno on a full disk."""
    import os

    from ragcost.atomic import disk_fix

    if not isinstance(e, (RuntimeError, OSError)):
        return None
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return disk_fix("ENOSPC") if st.f_bavail * st.f_frsize < (1 << 16) else None


def _forget_build(directory: Path, build_id: str, names: set[str], existed: bool) -> None:
    """After a failed write: delete this build's files unless the live manifest names them (a failure
    after the commit), and the index folder when this build made it and it is left empty."""
    try:
        if build_id in (directory / MANIFEST).read_text(encoding="utf-8"):
            return
    except OSError:
        pass
    _remove_unreferenced(directory, keep=set(), only=names)
    if not existed:
        try:
            directory.rmdir()
        except OSError:
            pass


def _manifest(index: VectorIndex, labels: np.ndarray, vectors: np.ndarray, fingerprint: dict[str, Any],
              build_seconds: float, names: dict[str, str], files: dict) -> Manifest:
    n = len(labels)
    index_bytes = int(index.nbytes())
    return Manifest(
        format=FORMAT,
        fingerprint=jsonable(fingerprint),
        vector_count=n,
        dim=int(vectors.shape[1]) if vectors.ndim == 2 else index.dim,
        precision=index.precision,
        backend=index.backend,
        kind=index.config.kind,
        shards=len(index.shards) if isinstance(index, ShardedIndex) else 1,
        index_bytes=index_bytes,
        bytes_per_vector=round(index_bytes / n, 3) if n else 0.0,
        file_bytes=sum(r.bytes for r in files.values()),
        index_file=names["index"],
        vectors_file=names["vectors"],
        labels_file=names["labels"],
        build_seconds=float(build_seconds),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        warnings=list(index.warnings),
        files=files,
    )


def _remove_unreferenced(directory: Path, keep: set[str], only: Optional[set[str]] = None) -> None:
    """Delete older builds' files and our crashed builds' temp files; never a file a build would not name.

    ``only``: delete just these names (and their temp files), e.g. a failed build's own files.
    """
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        name = path.name
        if only is not None and name not in only and temp_target(name) not in only:
            continue
        target = temp_target(name)
        ours = bool(_BUILD_FILE.match(name)) or (target is not None and (
            target == MANIFEST or _BUILD_FILE.match(target) is not None))
        if ours and name not in keep and path.is_file():
            try:
                path.unlink()
            except FileNotFoundError:  # a concurrent cleanup got there first
                pass


def read_manifest(directory: Path | str) -> Optional[Manifest]:
    """The manifest of a sound artifact in ``directory``, else None: there is none, or it or its files
    are damaged (checked as ``open_artifact`` does). A caller that rebuilds treats both alike."""
    directory = Path(directory)
    try:
        manifest = load_manifest(directory, "")
        if manifest is not None:
            verify_files(directory, manifest, "")
    except FingerprintError:
        return None
    return manifest


def open_artifact(
    directory: Path | str,
    config: IndexConfig,
    expected_fingerprint: dict[str, Any],
    rebuild_hint: str,
) -> LoadedIndex:
    """Open a committed artifact after checking its manifest, its files and that it matches ``config``."""
    directory = Path(directory)
    manifest = check_artifact(directory, config, expected_fingerprint, rebuild_hint)
    index = new_index(config, dim=manifest.dim, precision=manifest.precision, shards=manifest.shards)
    index.load(directory / manifest.index_file)
    index.warnings = list(manifest.warnings)
    labels = np.load(directory / manifest.labels_file)
    vectors = np.load(directory / manifest.vectors_file, mmap_mode="r")
    _check_loaded(directory, manifest, index, labels, rebuild_hint)
    return LoadedIndex(index=index, labels=labels, vectors=vectors, manifest=manifest)


def check_artifact(
    directory: Path | str,
    config: IndexConfig,
    expected_fingerprint: dict[str, Any],
    rebuild_hint: str,
    deep: bool = False,
) -> Manifest:
    """What ``open_artifact`` checks before loading anything (manifest, fingerprint, kind, files): the
    manifest, or the FingerprintError ``query`` would give. ``deep`` re-hashes every file."""
    directory = Path(directory)
    manifest = load_manifest(directory, rebuild_hint)
    if manifest is None:
        raise FingerprintError(f"no index at {directory}; {rebuild_hint}")
    check_fingerprint(manifest, expected_fingerprint, rebuild_hint)
    built = {"backend": manifest.backend, "kind": manifest.kind}
    wanted = {"backend": config.backend, "kind": config.kind}
    if built != wanted:
        changes = "; ".join(fingerprint_changes(built, wanted))
        raise FingerprintError(f"index at {directory} differs from its config ({changes}); {rebuild_hint}")
    if deep and not manifest.files:
        raise FingerprintError(f"{directory / MANIFEST}: written before ragcost recorded checksums, so its files "
                               f"cannot be verified deeply; delete it and {rebuild_hint}")
    verify_files(directory, manifest, rebuild_hint, deep=deep)
    return manifest


def _check_loaded(directory: Path, manifest: Manifest, index: VectorIndex, labels: np.ndarray, hint: str) -> None:
    """What holds for every artifact, checksums or not: labels sorted and unique, the index as long."""
    if len(labels) > 1 and not (labels[1:] > labels[:-1]).all():  # a bool per label, not an int64 diff
        raise FingerprintError(f"{directory / manifest.labels_file}: the index file is damaged: labels are not "
                               f"sorted and unique as written; {hint}")
    if len(index) != manifest.vector_count:
        raise FingerprintError(f"{directory / manifest.index_file}: the index file is damaged: it holds {len(index)} "
                               f"vectors, the manifest says {manifest.vector_count}; {hint}")
