"""One atomic write of a folder of files: temp names, fsync, rename, and the commit file last.

A reader that trusts only what the commit file names (an index manifest, a BM25 meta file) never
sees a half-written build: before the commit file's rename the previous build is live, after it
the new one. A crash leaves only hidden temp files (``temp_name``), which ``is_temp`` recognises.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Callable, Mapping, Optional

Writer = Callable[[Path], None]  # writes one whole file at the path it is given
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<token>[0-9a-f]{12})\.tmp$")


def temp_name(name: str, token: str) -> str:
    """The hidden name ``name`` is written under before its rename."""
    return f".{name}.{token}.tmp"


def temp_target(filename: str) -> Optional[str]:
    """The final name a temp file of ours was to become, or None when ``filename`` is not one."""
    m = _TEMP.match(filename)
    return m.group("name") if m else None


def fsync_path(path: Path) -> None:
    """Flush a file's (or a folder's) data to disk; folders that cannot be opened are skipped."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_files(directory: Path | str, files: Mapping[str, Writer], commit: Optional[tuple[str, Writer]] = None) -> None:
    """Write ``files`` (name -> writer) into ``directory``, then ``commit`` last.

    Each file is written under a hidden temp name, fsynced, and renamed into place; the folder is
    fsynced before the commit file is written, so the commit never names a file that is not durable,
    and again after it. On an error the temp files written so far are removed.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    _write_all(directory, files, token)
    fsync_path(directory)
    if commit is not None:
        _write_all(directory, dict([commit]), token)
        fsync_path(directory)


def _write_all(directory: Path, files: Mapping[str, Writer], token: str) -> None:
    pending: list[Path] = []
    try:
        for name, write in files.items():
            tmp = directory / temp_name(name, token)
            pending.append(tmp)
            write(tmp)
            fsync_path(tmp)
            os.replace(tmp, directory / name)
            pending.pop()
    except BaseException:
        for tmp in pending:
            try:
                tmp.unlink()
            except OSError:
                pass
        raise
