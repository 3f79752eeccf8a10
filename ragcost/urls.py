"""A database URL as messages show it: never with its password (the one helper every error line uses)."""

from __future__ import annotations

import re

_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def shown_url(url: object) -> str:
    """``url`` with its password replaced by ``***``: through SQLAlchemy's parser where it parses, else by pattern,
    so an unparsable URL (the one an error is about) is hidden too."""
    text = str(url)
    try:
        import sqlalchemy as sa

        return sa.engine.make_url(text).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: hide by pattern
        return _PASSWORD.sub(r"\1***@", text)


def duckdb_url_problem(url: str) -> str | None:
    """What is wrong with a DuckDB URL that names a host (``duckdb://st/x.duckdb``, one slash short: 'st' is read
    as a host and DuckDB's connect() fails with a TypeError), with the fix; None for any other URL."""
    try:
        import sqlalchemy as sa

        u = sa.engine.make_url(str(url))
    except Exception:  # noqa: BLE001 - not parsable: the caller's own check says so
        return None
    if u.get_backend_name() != "duckdb" or not u.host:
        return None
    path = "/".join(p for p in (u.host, u.database) if p)
    return (f"store URL {shown_url(url)!r} names a host ({u.host!r}); a DuckDB file URL has three slashes before a "
            f"relative path: duckdb:///{path} (four for an absolute one)")
