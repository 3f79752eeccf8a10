"""Several processes (replicas, --workers) creating one fresh PostgreSQL schema at once: each open succeeds."""

from __future__ import annotations

import threading

import pytest


def _open_together(n: int, open_one) -> list[str]:
    """``n`` threads, each with its own connections, open at the same instant; what each raised, if anything."""
    gate = threading.Barrier(n)
    errors: list[str] = []

    def one() -> None:
        gate.wait()
        try:
            open_one()
        except Exception as e:  # collected: the assertion names every failure
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


def _ledger(url: str) -> None:
    from ragcost.cost.ledger import Ledger

    Ledger(url).close()


def _cache(url: str) -> None:
    from ragcost.cache.backends import SQLCache

    SQLCache(url, "ddl").engine.dispose()


def _store(url: str) -> None:
    from ragcost.store.sql import SQLStore

    s = SQLStore(url, "ddl", {}).open()
    s.engine.dispose()


@pytest.mark.parametrize("open_one", [_ledger, _cache, _store], ids=["ledger", "cache", "store"])
def test_four_openers_of_one_fresh_postgresql_database_all_succeed(open_one):
    from tests.conftest import postgres_database

    for _ in range(3):  # unserialised, 4 openers failed on most fresh databases (UniqueViolation on pg_type)
        with postgres_database() as url:
            assert _open_together(4, lambda: open_one(url)) == []


def test_an_upgrade_adding_a_column_from_two_processes_at_once_adds_it_once():
    import sqlalchemy as sa

    from ragcost.cost.ledger import Ledger
    from tests.conftest import postgres_database

    with postgres_database() as url:
        Ledger(url).close()
        eng = sa.create_engine(url)
        with eng.begin() as c:  # a ledger an older ragcost wrote: no replica column
            c.execute(sa.text("ALTER TABLE rc_ledger_queries DROP COLUMN replica"))
        assert _open_together(4, lambda: _ledger(url)) == []
        with eng.connect() as c:
            cols = c.execute(sa.text("SELECT count(*) FROM information_schema.columns "
                                     "WHERE table_name = 'rc_ledger_queries' AND column_name = 'replica'")).scalar()
        eng.dispose()
        assert cols == 1
