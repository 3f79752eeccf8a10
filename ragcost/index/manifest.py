"""The manifest of an index artifact: what it holds, what made it, and each file's size, checksum and shape."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, Field, ValidationError

from ragcost.errors import FingerprintError

MANIFEST = "manifest.json"
FORMAT = 2  # 1: no per-file records (before checksums); 2: ``files`` holds them


class FileRecord(BaseModel):
    """One artifact file as written: bytes, BLAKE2b checksum and, for .npy files, dtype and shape."""

    bytes: int
    blake2b: str
    dtype: Optional[str] = None
    shape: Optional[list[int]] = None


class Manifest(BaseModel):
    """What an index artifact holds and what made it."""

    format: int = Field(1, description="manifest format; 2 records every file's checksum, dtype and shape")
    fingerprint: dict[str, Any] = Field(description="what made it: model hash, dim, precision, build, corpus")
    vector_count: int
    dim: int
    precision: str
    backend: str
    kind: str
    shards: int = Field(1, ge=1, description="graphs the index is held in, searched together and merged (1: one)")
    index_bytes: int = Field(description="bytes the index holds in memory")
    bytes_per_vector: float = Field(description="index_bytes / vector_count")
    file_bytes: int = Field(description="bytes on disk of this build's index, vectors and labels files")
    index_file: str
    vectors_file: str
    labels_file: str
    build_seconds: float
    created_at: str = Field(description="ISO 8601, UTC")
    warnings: list[str] = Field(default_factory=list)
    files: dict[str, FileRecord] = Field(default_factory=dict, description="file name -> as written (format 2)")

    def file_names(self) -> list[str]:
        return [self.index_file, self.vectors_file, self.labels_file]


def load_manifest(directory: Path, rebuild_hint: str) -> Optional[Manifest]:
    """The manifest in ``directory``, None when there is none; a damaged one is one FingerprintError line."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    try:
        return Manifest.model_validate_json(path.read_bytes())
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        what = "it is not JSON (truncated or corrupt)" if err["type"].startswith("json") else \
            f"{where}: {err['msg'].lower()}" if where else err["msg"].lower()
        raise FingerprintError(f"{path}: the index manifest is damaged ({what}); {rebuild_hint}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise FingerprintError(f"{path}: the index manifest cannot be read ({type(e).__name__}); {rebuild_hint}") from None


def jsonable(value: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint as it will read back from JSON, so comparisons see the same types."""
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


_MISSING = object()


def _short(value: Any) -> str:
    if value is _MISSING:
        return "(none)"
    text = str(value)
    # Hashes are long and only their start tells two apart for a human.
    if re.fullmatch(r"[0-9a-fA-F]{16,}", text) or (len(text) > 40 and " " not in text):
        return text[:12]
    return text


def fingerprint_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for every key whose value differs (nested keys dotted)."""
    a, b = _flatten(jsonable(old)), _flatten(jsonable(new))
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
