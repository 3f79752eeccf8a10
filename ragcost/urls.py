"""A database URL as messages show it: never with its password (the one helper every error line uses); and the file an
embedded database's URL names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

# The user-info of a URL up to its LAST '@' (greedy): a password holding an unencoded '@' is hidden whole.
_PASSWORD = re.compile(r"(://[^:/@\s]*:)\S*@")
# A URL without '://' (the malformed one an error is about): anything between a ':' and an '@'.
_LOOSE_PASSWORD = re.compile(r"([^:/@\s]*:)\S*@")
# Query parameters libpq and the drivers take as secrets (postgresql://u@h/db?password=...).
_SECRET_PARAM = re.compile(r"([?&](?:password|passwd|pwd|sslpassword|passfile|token|secret|api_key)=)[^&#\s]*", re.I)


def _by_pattern(text: str) -> str:
    hidden = _PASSWORD.sub(r"\1***@", text) if "://" in text else _LOOSE_PASSWORD.sub(r"\1***@", text)
    return _SECRET_PARAM.sub(r"\1***", hidden)


def shown_url(url: object) -> str:
    """``url`` with its password (and a ``password=`` query parameter) replaced by ``***``: through SQLAlchemy's
    parser where it parses to one host, else by pattern, so an unparsable URL (the one an error is about) and a
    password holding an unencoded '@' are hidden too."""
    text = str(url)
    try:
        import sqlalchemy as sa

        u = sa.engine.make_url(text)
        if u.host and "@" in u.host:  # 'u:p@ss@h': SQLAlchemy ends the password at the first '@'
            return _by_pattern(text)
        return _SECRET_PARAM.sub(r"\1***", u.render_as_string(hide_password=True))
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: hide by pattern
        return _by_pattern(text)


def _secrets(url: str) -> list[str]:
    """Every text that may be ``url``'s password, as SQLAlchemy and as the pattern read it (longest first)."""
    found: set[str] = set()
    ambiguous = False
    try:
        import sqlalchemy as sa

        u = sa.engine.make_url(url)
        ambiguous = bool(u.host and "@" in u.host)
        if ambiguous:  # the password runs to the last '@'; its tail is what a driver reports as the host
            found.add(u.host.rsplit("@", 1)[0])
        elif u.password:
            found.add(str(u.password))
    except Exception:  # noqa: BLE001 - unparsable: the pattern's reading only
        ambiguous = True
    if ambiguous:
        m = (_PASSWORD if "://" in url else _LOOSE_PASSWORD).search(url)
        if m:
            found.add(url[m.end(1):m.end() - 1])
    found.update(m.group(0).split("=", 1)[1] for m in _SECRET_PARAM.finditer(url))
    # a password of 1-3 characters is not searched for in free text (it would blot out ordinary words)
    return sorted((s for s in found if len(s) >= 4 and s != "***"), key=len, reverse=True)


def without_secrets(text: object, url: object) -> str:
    """``text`` (a driver's error message about ``url``) with ``url`` shown as ``shown_url`` does and any other
    occurrence of its password replaced by ``***``: a driver may quote the URL or a host it misread."""
    out, raw = str(text), str(url)
    if raw:
        out = out.replace(raw, shown_url(raw))
    for secret in _secrets(raw):
        out = out.replace(secret, "***")
    return out


def hide_passwords(text: object) -> str:
    """``text`` with the password of every URL in it (``scheme://user:password@``, ``?password=``) replaced by
    ``***``: the last guard of the lines the CLI and the server print, for a URL no message named on purpose."""
    return _SECRET_PARAM.sub(r"\1***", _PASSWORD.sub(r"\1***@", str(text)))


def url_problem(url: str) -> str | None:
    """What is wrong with a database URL that parses but cannot mean what was meant, with the fix; None if
    nothing is: a host holding '@' (a password with an unencoded '@': the rest of it would be sent to DNS as a
    host) or a DuckDB URL naming a host (``duckdb://st/x.duckdb``, one slash short)."""
    try:
        import sqlalchemy as sa

        u = sa.engine.make_url(str(url))
    except Exception:  # noqa: BLE001 - not parsable: the caller's own check says so
        return None
    if u.host and "@" in u.host:
        return (f"URL {shown_url(url)!r}: its password (or user name) holds an '@', so the part after it was read as "
                "the host; write '@' inside a password as %40 (and ':' as %3A, '/' as %2F)")
    return duckdb_url_problem(url)


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


def db_file(url: object, backends: tuple[str, ...] = ("duckdb", "sqlite")) -> Optional[Path]:
    """The database file of an embedded database's URL (DuckDB, SQLite: ``backends``); None for a server, an
    in-memory database, another backend or a URL SQLAlchemy cannot parse (whoever opens it says what is wrong)."""
    try:
        import sqlalchemy as sa

        u = sa.engine.make_url(str(url))
    except Exception:  # noqa: BLE001 - not a SQLAlchemy URL (redis://): the caller's own check decides
        return None
    if u.get_backend_name() not in backends or u.database in (None, "", ":memory:"):
        return None
    return Path(u.database)
