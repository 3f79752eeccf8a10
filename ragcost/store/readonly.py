"""Opening a database only to read it: DuckDB files in DuckDB's own read-only mode.

A read-only open works on a read-only file system or a 0444 file, and can never create a file,
a table or a column. DuckDB refuses a second connection with another configuration to a file this
process already holds open for writing (a server reading its own ledger); that open shares the
process's existing one instead, which is read from and never written by the caller.
"""

from __future__ import annotations

import sqlalchemy as sa

_SAME_FILE = "different configuration"


def read_only_engine(url: str) -> sa.Engine:
    """An engine for reading ``url``; DuckDB files are opened with ``read_only=True``."""
    u = sa.engine.make_url(url)
    if u.get_backend_name() != "duckdb" or u.database in (None, "", ":memory:") or "access_mode" in u.query:
        return sa.create_engine(u)
    engine = sa.create_engine(u, connect_args={"read_only": True})
    try:
        with engine.connect():
            pass
    except sa.exc.DBAPIError as e:
        engine.dispose()
        if _SAME_FILE in str(e).lower():
            return sa.create_engine(u)  # this process has it open for writing: read through that
        raise
    return engine
