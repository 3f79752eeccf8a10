"""Database errors as one line: what failed, on which store, and the fix.

A driver's message can carry SQL and bound values (document text); neither ever reaches a
``StoreError``. The original exception stays chained for ``--debug``.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Iterator, Optional

import sqlalchemy as sa

from ragcost.errors import StoreError
from ragcost.urls import shown_url

_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
LOCKED = ("could not set lock", "conflicting lock")


def driver_line(e: BaseException, limit: int = 120) -> str:
    """The driver's first line with every quoted part elided (quoted parts carry values), truncated."""
    orig = getattr(e, "orig", None) or e
    lines = str(orig).strip().splitlines()
    first = _QUOTED.sub("'…'", lines[0] if lines else "")
    first = first if len(first) <= limit else first[: limit - 1] + "…"
    return f"{type(orig).__name__}: {first}" if first else type(orig).__name__


def database_error(e: BaseException, url: str, doing: str) -> StoreError:
    """The one-line StoreError for a database error raised while ``doing`` (e.g. "writing 40 documents")."""
    orig = getattr(e, "orig", None) or e
    low = str(orig).lower()
    where = f"store {shown_url(url)}"
    if is_locked(orig):
        return StoreError(held_message(url, orig))
    disk = disk_problem(str(orig))
    if disk is not None:
        return StoreError(f"{where}: {doing} failed: {disk}")
    if "expression depth" in low or "stack depth limit" in low:
        return StoreError(f"{where}: {doing}: the filter is too large for the database; combine conditions with "
                          "$in, or split the query")
    if "surrogate" in low:
        return StoreError(surrogate_message(url, doing))
    if "0x00" in low and "nul" in low:
        return StoreError(f"{where}: {doing}: a text, title or metadata value holds a NUL (0x00) byte, which "
                          "PostgreSQL cannot store; strip NUL bytes from the source")
    if isinstance(e, sa.exc.OperationalError) or isinstance(e, sa.exc.InterfaceError):
        return StoreError(f"{where}: {doing} failed ({driver_line(e)}); check the URL and that the database is running")
    return StoreError(f"{where}: {doing} failed ({driver_line(e)}); rerun with --debug for the driver's full message")


def is_locked(e: BaseException) -> bool:
    """A DuckDB file whose lock another process holds (DuckDB lets one process open a file for writing)."""
    low = str(getattr(e, "orig", None) or e).lower()
    return any(m in low for m in LOCKED)


def held_message(url: str, e: Optional[BaseException] = None, what: str = "store") -> str:
    """The one line for a store (or ledger, ``what``) file another process holds: who holds it, and the fix for that holder."""
    try:
        path = sa.engine.make_url(url).database or shown_url(url)
    except Exception:  # noqa: BLE001
        path = shown_url(url)
    pid, holder = lock_holder(str(getattr(e, "orig", None) or e or ""))
    return f"{what} {path} is held by {describe(pid, holder)}: {_HINTS.get(holder, _HINTS[None])}"


# What to do, by what holds the file. An eval or tune run holds its cache, always a DuckDB file of its
# own that no PostgreSQL URL replaces: its hint is --cache-dir, never PostgreSQL.
_HINTS = {
    "serve": "stop that server first, or use a PostgreSQL store, which a server and other commands can share",
    "eval": "wait for it to finish, or give this run its own cache with --cache-dir DIR",
    "tune": "wait for it to finish, or give this run its own cache with --cache-dir DIR",
    "index": "wait for it to finish, or use a PostgreSQL store, which allows queries while indexing",
    "query": "wait for it to finish; DuckDB lets one process open a store file at a time",
    None: "wait for it to finish or stop it; DuckDB lets one process open a store file at a time",
}
_COMMANDS = ("serve", "eval", "tune", "index", "query", "report", "cache", "validate", "plan")
_PID = re.compile(r"\(PID (\d+)\)")


def lock_holder(message: str) -> tuple[Optional[int], Optional[str]]:
    """(PID, ragcost command) of the process DuckDB names in a lock error; None where it cannot be told.

    DuckDB says "Conflicting lock is held in <executable> (PID n)"; the command comes from that
    process's command line (Linux /proc), e.g. ``ragcost serve kb.yaml`` -> "serve".
    """
    m = _PID.search(message)
    if not m:
        return None, None
    pid = int(m.group(1))
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace").split("\0")
    except OSError:
        return pid, None
    for i, a in enumerate(argv):
        if "ragcost" in Path(a).name or a.startswith("ragcost."):
            for b in argv[i + 1:]:
                if b in _COMMANDS:
                    return pid, b
                if not b.startswith("-"):
                    break
    return pid, None


def describe(pid: Optional[int], holder: Optional[str]) -> str:
    what = {"serve": "a `ragcost serve` server", "index": "an index run (`ragcost index`)"}.get(
        holder or "", f"a `ragcost {holder}` run" if holder else "another process")
    return f"{what} (PID {pid})" if pid is not None else what


def disk_problem(text: str) -> Optional[str]:
    """What to do when a write failed because the disk is full or read-only (from an OSError's or a driver's text)."""
    from ragcost.atomic import disk_fix

    low = text.lower()
    for marker, errno_name in (("no space left", "ENOSPC"), ("disk quota", "EDQUOT"), ("read-only file system", "EROFS")):
        if marker in low:
            return disk_fix(errno_name)
    return None


@contextlib.contextmanager
def translated(url: str, doing: str) -> Iterator[None]:
    """Turn any SQLAlchemy/driver error inside the block into the one-line StoreError."""
    try:
        yield
    except sa.exc.SQLAlchemyError as e:
        raise database_error(e, url, doing) from e
    except UnicodeEncodeError as e:  # psycopg encodes text to UTF-8 itself, outside SQLAlchemy's wrapping
        raise StoreError(surrogate_message(url, doing)) from e


def surrogate_message(url: str, doing: str) -> str:
    return (f"store {shown_url(url)}: {doing}: a text holds a lone surrogate (not valid Unicode); "
            "fix the source's encoding")
