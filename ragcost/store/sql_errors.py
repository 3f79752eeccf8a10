"""Database errors as one line: what failed, on which store, and the fix.

A driver's message can carry SQL and bound values (document text); neither ever reaches a
``StoreError``. The original exception stays chained for ``--debug``.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

import sqlalchemy as sa

from ragcost.errors import StoreError

_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
LOCKED = ("could not set lock", "conflicting lock")


def shown_url(url: str) -> str:
    """The URL as messages show it: the password hidden."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001  (an unparsable URL is shown as given)
        return url


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
    if any(m in low for m in LOCKED):
        return StoreError(held_message(url))
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


def held_message(url: str) -> str:
    try:
        path = sa.engine.make_url(url).database or url
    except Exception:  # noqa: BLE001
        path = url
    return (f"store {path} is held by another process (an index run): wait for it to finish, or use a "
            "PostgreSQL store, which allows queries while indexing")  # DuckDB allows one writing process


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
