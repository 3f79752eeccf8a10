"""One atomic write of a folder of files: temp names, fsync, rename, and the commit file last.

A reader that trusts only what the commit file names (an index manifest, a BM25 meta file) never
sees a half-written build: before the commit file's rename the previous build is live, after it
the new one. A crash leaves only hidden temp files (``temp_name``), which ``is_temp`` recognises.

Also here: ``replace_text``, the one atomic in-place edit of a user's file (``eval --write``,
``tune --write``: mode, owner and a symlink's target kept), and ``disk_error``, the one wording of
a write that failed on a full or read-only disk.
"""

from __future__ import annotations

import errno
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


_DISK_FIXES = {
    "ENOSPC": "the disk is full (no space left on device); free space on it, or point the pipeline's store and "
              "index_dir at another disk, and rerun",
    "EDQUOT": "the disk quota is used up; free space in your quota, or point the pipeline's store and index_dir "
              "elsewhere, and rerun",
    "EROFS": "the file system is read-only; point the pipeline's store and index_dir at a writable folder, or "
             "remount it read-write, and rerun",
}


def disk_fix(errno_name: str) -> str:
    """The fix for a write that failed because the disk is full (ENOSPC, EDQUOT) or read-only (EROFS)."""
    return _DISK_FIXES[errno_name]


def disk_error(e: BaseException, with_path: bool = True) -> Optional[str]:
    """``path: <the fix>`` when ``e`` is a full or read-only disk, else None (one wording for every writer).

    ``with_path=False``: the fix alone, for a caller that names the folder itself (a temp file's name helps no one).
    """
    if not isinstance(e, OSError) or e.errno is None:
        return None
    name = errno.errorcode.get(e.errno)
    if name not in _DISK_FIXES:
        return None
    return f"{e.filename}: {disk_fix(name)}" if e.filename and with_path else disk_fix(name)


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


def check_editable(path: Path | str, what: str = "--write") -> Path:
    """The real file ``path`` names (a symlink's target), refused when it cannot be edited in place.

    Called before a long run whose last step edits the file, so the run is not wasted. A file with
    no write permission for its owner (0444) was made read-only on purpose: it is refused, not replaced.
    """
    from ragcost.errors import ConfigError

    link = Path(path)
    real = Path(os.path.realpath(link))
    if not real.is_file():
        raise ConfigError(f"{what}: {link} is not a file; give the pipeline YAML to edit")
    mode = real.stat().st_mode & 0o7777
    if not mode & 0o200:
        raise ConfigError(f"{what}: {real} is read-only (mode {mode:04o}); make it writable (chmod u+w {real}) "
                          f"or leave out {what}; nothing written")
    return real


def replace_text(path: Path | str, text: str, check: Optional[Callable[[Path], None]] = None,
                 what: str = "--write") -> Path:
    """Replace the text of the file at ``path`` atomically, as an in-place edit: returns the file written.

    A symlink's target is edited (the link stays a link); the file keeps its mode, owner and group.
    ``check(candidate)``, when given, is called with the new text in a hidden temp file beside
    ``path`` itself (so paths relative to the file resolve as they will): an exception from it
    leaves the file untouched. The new text is written to a temp file beside the target, fsynced,
    and renamed over it; the folder is fsynced after.
    """
    from ragcost.errors import ConfigError

    link = Path(path)
    real = check_editable(link, what)
    st = real.stat()
    token = uuid.uuid4().hex[:12]
    tmp = real.with_name(temp_name(real.name, token))
    probe = link.with_name(temp_name(link.name, token)) if link.parent.resolve() != real.parent else tmp
    made: list[Path] = []
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        made.append(tmp)
        try:
            data = memoryview(text.encode("utf-8"))
            while data:
                data = data[os.write(fd, data):]
            os.fchmod(fd, st.st_mode & 0o7777)
            if (os.fstat(fd).st_uid, os.fstat(fd).st_gid) != (st.st_uid, st.st_gid):
                try:
                    os.fchown(fd, st.st_uid, st.st_gid)
                except PermissionError:
                    raise ConfigError(f"{what}: cannot keep the owner of {real} (uid {st.st_uid}, gid {st.st_gid}) "
                                      f"as this user; run as its owner; nothing written") from None
            os.fsync(fd)
        finally:
            os.close(fd)
        if check is not None:
            if probe != tmp:
                probe.write_text(text, encoding="utf-8")
                made.append(probe)
            check(probe)
        os.replace(tmp, real)
        made.remove(tmp)
        fsync_path(real.parent)
    finally:
        for p in made:
            try:
                p.unlink()
            except OSError:
                pass
    return real
