"""The ledger: one transaction per query, additive migrations, selection by time and pipeline."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import pytest
import sqlalchemy as sa

from ragcost.cost.ledger import Ledger
from ragcost.errors import StoreError


def _rows(n_stages=3):
    return [{"stage": f"s{i}", "resource": "cpu", "wall_seconds": 0.1 * (i + 1), "cost_usd": 0.001, "call_id": None}
            for i in range(n_stages)]


@pytest.fixture
def url(any_store_url):
    return any_store_url


class TestCrashMidBatch:
    def test_completed_queries_stay_and_the_crashed_one_leaves_no_rows(self, url):
        led = Ledger(url)
        run = led.start_run("query", "p", "v1", {"k": 1})
        for i in range(3):
            led.record_query(run, {"query_id": f"q{i}", "text": f"t{i}", "ok": True, "useful": 1}, _rows())
        bad = _rows()
        bad[2]["items"] = None  # NOT NULL: fails in the database, after the query row went in
        with pytest.raises(sa.exc.DBAPIError):  # raised by the database, inside the transaction
            led.record_query(run, {"query_id": "q3", "text": "t3"}, bad)
        led.close()

        led = Ledger(url)  # a fresh process would see the same
        qrows, srows = led.read()
        assert [q["query_id"] for q in qrows] == ["q0", "q1", "q2"]
        assert len(srows) == 9 and {r["query_id"] for r in srows} == {"q0", "q1", "q2"}
        assert [r["stage"] for r in srows if r["query_id"] == "q0"] == ["s0", "s1", "s2"]
        assert qrows[0]["cost_usd"] == pytest.approx(0.003)
        led.close()

    def test_a_group_commit_writes_every_query_or_none(self, url):
        led = Ledger(url)
        run = led.start_run("query", "p", "v1")
        ids = led.record_queries(run, [({"query_id": f"g{i}", "text": f"t{i}"}, _rows()) for i in range(4)])
        assert ids == ["g0", "g1", "g2", "g3"]
        bad = _rows()
        bad[1]["items"] = None  # NOT NULL: fails in the database, after the other queries' rows went in
        with pytest.raises(sa.exc.DBAPIError):
            led.record_queries(run, [({"query_id": "h0"}, _rows()), ({"query_id": "h1"}, bad), ({"query_id": "h2"}, _rows())])
        qrows, srows = led.read()
        assert sorted(q["query_id"] for q in qrows) == ["g0", "g1", "g2", "g3"]  # none of the failed group
        assert len(srows) == 12 and all(q["cost_usd"] == pytest.approx(0.003) for q in qrows)
        led.close()

    def test_unknown_column_is_refused_before_writing(self, url):
        led = Ledger(url)
        run = led.start_run("query", "p", "v1")
        with pytest.raises(StoreError, match="unknown column.*'latency'"):
            led.record_query(run, {"query_id": "q"}, [{"stage": "s", "resource": "cpu", "cost_usd": 0, "latency": 1}])
        assert led.read() == ([], [])
        led.close()


class TestSchema:
    def test_migration_adds_missing_columns_and_keeps_data(self, tmp_path):
        path = tmp_path / "old.duckdb"
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE rc_ledger_runs (run_id VARCHAR PRIMARY KEY, kind VARCHAR, pipeline VARCHAR, started_at TIMESTAMP)")
        con.execute("INSERT INTO rc_ledger_runs VALUES ('old', 'query', 'p', TIMESTAMP '2026-01-01 00:00:00')")
        con.close()
        led = Ledger(f"duckdb:///{path}")
        runs = led.list_runs()
        assert runs[0]["run_id"] == "old" and runs[0]["price_book_version"] is None
        led.close()

    def test_row_without_a_cost_is_refused(self, url):
        with Ledger(url) as led, pytest.raises(StoreError, match=r"lacks \['cost_usd'\]"):
            led.record_query(led.start_run("query", "p", "v"), {"query_id": "q"}, [{"stage": "s", "resource": "cpu"}])

    def test_cached_tokens_unknown_stays_null(self, url):
        led = Ledger(url)
        run = led.start_run("query", "p", "v")
        led.record_query(run, {"query_id": "q"}, [{"stage": "g", "resource": "api", "cost_usd": 0.0, "input_tokens": 5}])
        (row,) = led.read()[1]
        assert row["cached_input_tokens"] is None and row["input_tokens"] == 5 and row["shared_by"] == 1
        led.close()

    def test_bad_url_is_one_line(self):
        with pytest.raises(StoreError, match="ledger nosuchdb://x: cannot open"):
            Ledger("nosuchdb://x")

    def test_run_kind_is_checked(self, url):
        with Ledger(url) as led, pytest.raises(StoreError, match="'batch'"):
            led.start_run("batch", "p", "v")


class TestRead:
    def test_since_and_pipeline_select(self, url):
        led = Ledger(url)
        a, b = led.start_run("query", "a", "v"), led.start_run("eval", "b", "v")
        old = datetime(2026, 1, 1)
        led.record_query(a, {"query_id": "old", "at": old}, _rows(1))
        led.record_query(a, {"query_id": "new", "at": old + timedelta(days=10)}, _rows(1))
        led.record_query(b, {"query_id": "other", "at": old + timedelta(days=10)}, _rows(1))
        assert [q["query_id"] for q in led.read(since=old + timedelta(days=1), pipeline="a")[0]] == ["new"]
        assert {q["query_id"] for q in led.read(pipeline="b")[0]} == {"other"}
        assert len(led.read()[1]) == 3
        led.finish_run(a)
        assert next(r for r in led.list_runs() if r["run_id"] == a)["finished_at"] is not None
        led.close()


class TestReadOnly:
    """A report reads the ledger; it never creates a file, a table or a column."""

    def test_read_only_on_a_missing_sqlite_file_does_not_create_it(self, tmp_path):
        path = tmp_path / "new.db"
        with pytest.raises(StoreError, match=rf"^no ledger at {path}; run `ragcost query`"):
            Ledger(f"sqlite:///{path}", read_only=True)
        assert not path.exists()

    def test_read_only_on_a_store_without_ledger_tables_adds_none(self, tmp_path):
        path = tmp_path / "store.duckdb"
        duckdb.connect(str(path)).execute("CREATE TABLE documents (id VARCHAR)").close()
        url = f"duckdb:///{path}"
        with pytest.raises(StoreError, match=rf"^no ledger tables in {url}; run `ragcost query` first$"):
            Ledger(url, read_only=True)
        con = duckdb.connect(str(path))
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        con.close()
        assert tables == {"documents"}

    def test_read_only_on_an_old_schema_reads_the_missing_columns_as_null_and_changes_nothing(self, tmp_path):
        path = tmp_path / "old.duckdb"
        with Ledger(f"duckdb:///{path}") as led:
            led.record_query(led.start_run("query", "kb", "v"), {"text": "q"}, _rows())
        con = duckdb.connect(str(path))
        for table, keep in (("rc_ledger_queries", "query_id, run_id, \"at\", text, ok, useful, cost_usd, retrieved, error"),
                            ("rc_ledger_runs", "run_id, kind, pipeline, started_at")):
            con.execute(f"CREATE TABLE old AS SELECT {keep} FROM {table}")
            con.execute(f"DROP TABLE {table}")
            con.execute(f"ALTER TABLE old RENAME TO {table}")
        con.close()
        with Ledger(f"duckdb:///{path}", read_only=True) as led:  # a report on a ledger an older ragcost wrote
            qrows, srows = led.read(pipeline="kb")
        assert len(qrows) == 1 and qrows[0]["tenant"] is None and qrows[0]["outcome"] is None and srows
        con = duckdb.connect(str(path), read_only=True)
        cols = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'rc_ledger_queries'").fetchall()}
        con.close()
        assert "tenant" not in cols, "a read-only report added a column"

    def test_read_only_reads_what_was_written(self, url):
        with Ledger(url) as led:
            run = led.start_run("query", "kb", "v")
            led.record_query(run, {"text": "q"}, _rows())
        with Ledger(url, read_only=True) as led:
            qrows, srows = led.read(pipeline="kb")
        assert len(qrows) >= 1 and len(srows) >= 3

    def test_messages_never_print_the_password(self):
        with pytest.raises(StoreError) as e:
            Ledger("postgresql+psycopg://u:s3cret@127.0.0.1:1/none", read_only=True)
        assert "s3cret" not in str(e.value) and "u:***@" in str(e.value)
