"""Schema changes that several processes may make at once: one at a time on PostgreSQL.

Replicas of ``ragcost serve`` (and ``--workers N``) open the ledger, the store and the SQL cache
together. On a fresh PostgreSQL each saw a table missing and created it: the second CREATE failed
with a UniqueViolation on ``pg_type`` (3 of 5 tries with 4 processes; ``checkfirst`` cannot help,
every process checked before any created). An ``ALTER TABLE ... ADD COLUMN`` of an upgrade races
the same way. :func:`ddl_lock` takes a transaction-scoped advisory lock first, so the second
process waits, then finds the tables made. DuckDB allows one writing process: nothing to do.
"""

from __future__ import annotations

import zlib


def ddl_lock(conn, key: str) -> None:
    """Inside ``conn``'s transaction: wait until no other process changes ``key``'s schema (PostgreSQL)."""
    if conn.dialect.name != "postgresql":
        return
    import sqlalchemy as sa

    # one 32-bit key per schema; the lock is released when the transaction ends
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": zlib.crc32(f"ragcost:{key}".encode()) & 0x7FFFFFFF})
