"""Checking an artifact's files against its manifest before anything is served from them.

Always (cheap): each file the manifest names is a plain name inside the index folder, its size is
as recorded, and the .npy headers hold the recorded dtype and shape, which agree with the
manifest's ``vector_count`` and ``dim``. The BLAKE2b checksum of every file is compared on the first
open after a file changes -- ``.ragcost-verified.json`` keeps (size, mtime_ns, checksum) of files
already verified, so a warm start does not hash the vectors again -- and always when ``deep``.
Manifests written before checksums (format 1) get the cheap checks only.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Optional

import numpy as np

from ragcost.atomic import write_files
from ragcost.errors import FingerprintError
from ragcost.index.manifest import MANIFEST, FileRecord, Manifest, load_manifest

VERIFIED = ".ragcost-verified.json"
DEFAULT_HINT = "run `ragcost index PIPELINE` to rebuild it"
_CHUNK = 1 << 20


def checksum(path: Path) -> str:
    """BLAKE2b (16-byte digest, hex) of a file's bytes."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def npy_header(path: Path) -> tuple[str, list[int]]:
    """(dtype, shape) from a .npy file's header, without reading its data."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _fortran, dtype = read(f)
    return str(dtype), list(shape)


def file_record(path: Path) -> FileRecord:
    """How a freshly written file is recorded in the manifest."""
    dtype, shape = npy_header(path) if path.suffix == ".npy" else (None, None)
    return FileRecord(bytes=path.stat().st_size, blake2b=checksum(path), dtype=dtype, shape=shape)


def verify_files(directory: Path, manifest: Manifest, rebuild_hint: str, deep: bool = False) -> None:
    """Raise FingerprintError naming the first file that is not as the manifest says."""
    directory = Path(directory)
    for name in manifest.file_names():
        _check_inside(directory, name, rebuild_hint)
    expected = {manifest.vectors_file: ("float32", [manifest.vector_count, manifest.dim]),
                manifest.labels_file: ("int64", [manifest.vector_count])}
    for name, (dtype, shape) in expected.items():
        path = directory / name
        try:
            got = npy_header(path)
        except (OSError, ValueError) as e:
            raise _damaged(path, f"unreadable ({type(e).__name__})", rebuild_hint) from None
        if got != (dtype, shape):
            raise _damaged(path, f"holds {got[0]} {tuple(got[1])}, the manifest {MANIFEST} says "
                                 f"{dtype} {tuple(shape)} (edited or damaged)", rebuild_hint)
    if manifest.files:
        _check_records(directory, manifest, expected, rebuild_hint, deep)
    elif manifest.format >= 2:
        raise FingerprintError(f"{directory / MANIFEST}: format {manifest.format} without its file checksums "
                               f"(edited or damaged); {rebuild_hint}")


def _check_inside(directory: Path, name: str, rebuild_hint: str) -> None:
    path = directory / name
    if Path(name).name != name or name in ("", ".", "..") or path.resolve().parent != directory.resolve():
        raise FingerprintError(f"{directory / MANIFEST}: file {name!r} is not a file inside the index folder; "
                               f"refusing to open it; {rebuild_hint}")
    if not path.is_file():
        raise FingerprintError(f"{path}: missing; {rebuild_hint}")


def _check_records(directory: Path, manifest: Manifest, headers: dict, rebuild_hint: str, deep: bool) -> None:
    """Sizes always; the .npy headers (already read and found as the manifest says) against what was
    written; the checksum of each file not verified since it last changed, or of every file when deep."""
    seen = _read_verified(directory)
    fresh = {}
    for name in manifest.file_names():
        rec = manifest.files.get(name)
        path = directory / name
        if rec is None:
            raise FingerprintError(f"{directory / MANIFEST}: no checksum for {name} (edited or damaged); {rebuild_hint}")
        st = path.stat()
        if st.st_size != rec.bytes:
            raise _damaged(path, f"{st.st_size} bytes, written as {rec.bytes}", rebuild_hint)
        if name in headers and headers[name] != (rec.dtype, rec.shape):
            raise _damaged(path, "dtype/shape differ from when it was written", rebuild_hint)
        stamp = [st.st_size, st.st_mtime_ns, rec.blake2b]
        if deep or seen.get(name) != stamp:
            if checksum(path) != rec.blake2b:
                raise _damaged(path, "its checksum differs from when it was written", rebuild_hint)
        fresh[name] = stamp
    if fresh != {n: seen.get(n) for n in fresh}:
        remember_verified(directory, fresh)


def _damaged(path: Path, what: str, rebuild_hint: str) -> FingerprintError:
    return FingerprintError(f"{path}: the index file is damaged: {what}; {rebuild_hint}")


def _read_verified(directory: Path) -> dict:
    try:
        data = json.loads((directory / VERIFIED).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def remember_verified(directory: Path, stamps: dict[str, list]) -> None:
    """Record files whose checksum was just verified (or written); best effort: a read-only folder
    only means the next process hashes them again."""
    try:
        write_files(directory, {VERIFIED: lambda p: p.write_text(json.dumps(stamps))})
    except OSError:
        pass


def stamp(path: Path, rec: FileRecord) -> list:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, rec.blake2b]


def verify_artifact(directory: Path | str, deep: bool = False, rebuild_hint: Optional[str] = None) -> Manifest:
    """The manifest of the artifact in ``directory`` after checking its files (``deep``: re-hash every
    file, for ``ragcost validate --deep``); FingerprintError names the first problem and the fix."""
    directory = Path(directory)
    hint = rebuild_hint or DEFAULT_HINT
    manifest = load_manifest(directory, hint)
    if manifest is None:
        raise FingerprintError(f"no index at {directory}; {hint}")
    if deep and not manifest.files:
        raise FingerprintError(f"{directory / MANIFEST}: written before ragcost recorded checksums, so its files "
                               f"cannot be verified deeply; delete it and {hint}")
    verify_files(directory, manifest, hint, deep=deep)
    return manifest
