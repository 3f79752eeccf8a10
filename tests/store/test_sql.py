"""The SQLAlchemy store: the DocumentStore contract on DuckDB and PostgreSQL, and what only SQL stores do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from ragcost.config.fields import parse_fields
from ragcost.errors import StoreError
from ragcost.store import DocumentStore, open_store, store_registry
from ragcost.store.sql import SQLStore
from ragcost.testing.store import FIELDS, StoreContract, record

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def url(any_store_url: str) -> str:
    return any_store_url


class TestSQLStoreContract(StoreContract):
    """Every contract test, on a DuckDB file and on a PostgreSQL database."""

    @pytest.fixture
    def open_collection(self, url):
        opened: list[SQLStore] = []

        def open_collection(fields, collection: str = "kb") -> SQLStore:
            opened.append(SQLStore(url, collection, fields).open())
            return opened[-1]

        yield open_collection
        for s in opened:
            s.close()


class TestOpeningByScheme:
    def test_duckdb_and_postgresql_urls_open_the_sql_store(self, url):
        s = open_store(url, "kb", parse_fields(FIELDS))
        try:
            assert isinstance(s, SQLStore) and isinstance(s, DocumentStore)
        finally:
            s.close()
        assert store_registry.get("duckdb") is SQLStore and store_registry.get("postgresql") is SQLStore

    def test_an_unknown_scheme_lists_the_installed_ones_with_an_example(self):
        with pytest.raises(StoreError, match=r"no store for scheme 'mongodb'; installed: duckdb, postgresql; "
                                             r"example: duckdb:///\.ragcost/kb\.duckdb$") as info:
            open_store("mongodb://localhost/kb", "kb", {})
        assert "\n" not in str(info.value)

    def test_a_url_that_is_not_a_url_says_so_with_an_example(self):
        with pytest.raises(StoreError, match=r"is not a database URL; example: duckdb:///"):
            open_store("just a path.duckdb", "kb", {})

    def test_a_second_backend_registers_under_its_scheme(self):
        class OtherStore:
            def __init__(self, url, collection, fields):
                self.args = (url, collection, fields)

            def open(self):
                return self

        store_registry.register("sqlite")(OtherStore)
        try:
            s = open_store("sqlite:///kb.db", "kb", {})
            assert isinstance(s, OtherStore) and s.args == ("sqlite:///kb.db", "kb", {})
        finally:
            store_registry.unregister("sqlite")


class TestSQLStoreOnly:
    def test_open_creates_the_parent_folder_and_the_file(self, tmp_path):
        with SQLStore(f"duckdb:///{tmp_path}/nested/store.duckdb", "kb", parse_fields(FIELDS)):
            pass
        assert (tmp_path / "nested" / "store.duckdb").is_file()

    def test_using_a_closed_store_says_to_open_it(self, url):
        with pytest.raises(StoreError, match="not open"):
            SQLStore(url, "kb", {}).count_documents()

    def test_a_password_in_the_url_never_reaches_a_message(self):
        s = SQLStore("postgresql+psycopg://me:hunter2@127.0.0.1:1/nowhere", "kb", {})
        with pytest.raises(StoreError) as info:
            s.open()
        assert "hunter2" not in str(info.value) and "\n" not in str(info.value)

    def test_a_database_error_is_one_line_without_sql_or_document_text(self, url):
        with SQLStore(url, "kb", parse_fields(FIELDS)) as s:
            s.write([record("a", text="SECRET body")])
            with s.engine.begin() as conn:  # the table vanishes behind the store's back
                conn.execute(sa.text(f"DROP TABLE {s.chunks_t.name}"))
            with pytest.raises(StoreError, match=r"store .*: writing 1 documents failed \(.*\); rerun with --debug") as info:
                s.write([record("a", text="SECRET other body")])
        msg = str(info.value)
        assert "\n" not in msg and "SECRET" not in msg and "INSERT" not in msg.upper() and "DELETE" not in msg.upper()

    def test_a_store_another_process_holds_names_its_pid_and_says_to_wait(self, tmp_path):
        # issue 28: the holder is named by what it is (tests/reliability/test_catalogue_round2.py has a server,
        # an index run and an eval); a plain script is "another process", with no PostgreSQL hint
        path = tmp_path / "kb.duckdb"
        SQLStore(f"duckdb:///{path}", "kb", {}).open().close()
        holder = subprocess.Popen(
            [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('held', flush=True); sys.stdin.read()", str(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            with pytest.raises(StoreError) as info:
                open_store(f"duckdb:///{path}", "kb", {})
        finally:
            holder.stdin.close()
            holder.wait(timeout=30)
            holder.stdout.close()
        assert str(info.value) == (f"store {path} is held by another process (PID {holder.pid}): wait for it to finish "
                                   "or stop it; DuckDB lets one process open a store file at a time")

    def test_a_nul_byte_in_document_text_is_stored_or_refused_in_one_line(self, url):
        with SQLStore(url, "kb", {}) as s:
            try:
                s.write([record("a", text="nul \x00 SECRET")])
            except StoreError as e:  # PostgreSQL's text cannot hold NUL; DuckDB's can
                assert url.startswith("postgresql") and "\n" not in str(e) and "SECRET" not in str(e)
                assert "NUL (0x00) byte, which PostgreSQL cannot store; strip NUL bytes from the source" in str(e)
                assert s.count_documents() == 0
            else:
                assert s.chunks(s.vectors()[0])[0]["text"] == "nul \x00 SECRET #0"


CRASH_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from ragcost.config.fields import parse_fields
    from ragcost.records import SourceDocument
    from ragcost.store import ChunkRecord, DocumentRecord, SQLStore as Store, content_hash

    url, start = sys.argv[1], int(sys.argv[2])
    with Store(url, "kb", parse_fields({"tags": "list[str]"})) as s:
        for gen in range(start, start + 100000):
            recs = []
            for i in range(40):
                doc_id = f"d{(gen * 40 + i) % 120}"
                n = 1 + (gen + i) % 4
                doc = SourceDocument(id=doc_id, text=f"gen={gen} n={n}", metadata={"tags": [f"g{gen}", "x"]})
                chunks = [ChunkRecord(f"gen={gen} no={k}", 0, 1, 1, np.full(4, gen, np.float32)) for k in range(n)]
                recs.append(DocumentRecord(doc, content_hash(doc), chunks))
            s.write(recs)
            print("committed", gen, flush=True)
    """
)


@pytest.mark.slow
class TestCrashSafety:
    def test_a_writer_killed_mid_write_leaves_every_document_whole_and_once(self, url, tmp_path):
        script = tmp_path / "writer.py"
        script.write_text(CRASH_WRITER)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        start = 0
        for _ in range(2):  # kill twice: the second writer starts on a recovered file
            proc = subprocess.Popen([sys.executable, str(script), url, str(start)], stdout=subprocess.PIPE, text=True, env=env)
            try:
                committed = [proc.stdout.readline() for _ in range(4)]
                assert all(line.startswith("committed") for line in committed), committed
            finally:
                os.kill(proc.pid, signal.SIGKILL)  # lands mid-write: the writer never pauses between batches
                proc.wait()
                proc.stdout.close()
            start += 1000
        with SQLStore(url, "kb", parse_fields({"tags": "list[str]"})) as s:
            assert s.count_documents() == 120
            with s.engine.connect() as conn:
                doc_text = dict(conn.execute(sa.select(s.documents.c.id, s.documents.c.text)).all())
            labels, vecs = s.vectors()
            chunks = s.chunks(labels)
            assert len(chunks) == s.count_chunks() == len(labels)
            by_doc: dict[str, list[tuple[dict, np.ndarray]]] = {}
            for c, v in zip(chunks, vecs):
                by_doc.setdefault(c["doc_id"], []).append((c, v))
            assert set(by_doc) == set(doc_text)
            for doc_id, text in doc_text.items():
                gen, n = (part.split("=")[1] for part in text.split())
                assert sorted(c["chunk_no"] for c, _ in by_doc[doc_id]) == list(range(int(n))), doc_id
                for c, v in by_doc[doc_id]:
                    assert c["text"].startswith(f"gen={gen} "), f"{doc_id} mixes generations"
                    assert np.all(v == float(gen)) and c["metadata"]["tags"] == [f"g{gen}", "x"]
