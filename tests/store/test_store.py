"""The SQLAlchemy document store on a DuckDB file: round trips, labels, revisions, migrations, crashes."""

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
from ragcost.records import SourceDocument
from ragcost.store import ChunkRecord, DocumentRecord, content_hash
from ragcost.store.sql import SQLStore as Store

REPO = Path(__file__).resolve().parents[2]
FIELDS = {"tenant": "str", "year": "int", "tags": "list[str]"}
DIM = 8


def record(doc_id: str, text: str = "hello", n_chunks: int = 2, seed: int = 0, **meta) -> DocumentRecord:
    rng = np.random.default_rng(seed)
    doc = SourceDocument(id=doc_id, text=text, title=f"T {doc_id}", metadata=meta)
    chunks = [ChunkRecord(f"{text} #{i}", i, i + 1, 3, rng.standard_normal(DIM).astype(np.float32)) for i in range(n_chunks)]
    return DocumentRecord(doc, content_hash(doc), chunks)


@pytest.fixture
def url(any_store_url: str) -> str:
    return any_store_url


@pytest.fixture
def store(url: str):
    with Store(url, "kb", parse_fields(FIELDS)) as s:
        yield s


class TestStore:
    def test_open_creates_the_parent_folder_and_the_file(self, url, tmp_path):
        if not url.startswith("duckdb"):
            pytest.skip("a DuckDB file only")
        with Store(url, "kb", parse_fields(FIELDS)):
            pass
        assert (tmp_path / "nested" / "store.duckdb").is_file()

    def test_a_written_document_reads_back_with_metadata_and_chunks(self, store):
        store.write([record("a", tenant="acme", year=2024, tags=["x", "y"])])
        assert store.count_documents() == 1 and store.count_chunks() == 2
        labels, _ = store.vectors()
        got = store.chunks(labels)
        assert [c["chunk_no"] for c in got] == [0, 1]
        assert got[0]["doc_id"] == "a" and got[0]["title"] == "T a" and got[0]["text"] == "hello #0"
        assert got[0]["metadata"] == {"tenant": "acme", "year": 2024, "tags": ["x", "y"]}

    def test_chunks_come_back_in_the_order_of_the_labels_given(self, store):
        store.write([record("a"), record("b")])
        labels, _ = store.vectors()
        order = labels[::-1].tolist()
        assert [c["label"] for c in store.chunks(order)] == order

    def test_vectors_round_trip_exactly(self, store):
        recs = [record(str(i), seed=i, n_chunks=3) for i in range(5)]
        store.write(recs)
        labels, vecs = store.vectors()
        assert labels.dtype == np.int64 and vecs.dtype == np.float32 and vecs.shape == (15, DIM)
        assert np.all(np.diff(labels) > 0)
        expected = np.stack([c.vector for r in recs for c in r.chunks])
        np.testing.assert_array_equal(vecs, expected)

    def test_vectors_for_and_chunk_column_read_parts_of_the_same_rows(self, store):
        store.write([record(str(i), seed=i, n_chunks=2) for i in range(3)])
        labels, vecs = store.vectors()
        some = [int(labels[4]), int(labels[1]), 10**15]
        got = store.vectors_for(some)
        assert set(got) == {int(labels[4]), int(labels[1])}  # an unknown label is absent
        np.testing.assert_array_equal(got[int(labels[4])], vecs[4])
        col_labels, texts = store.chunk_column("text")
        np.testing.assert_array_equal(col_labels, labels)
        assert texts == [c["text"] for c in store.chunks(labels)]
        with pytest.raises(StoreError, match="no column 'vectr'"):
            store.chunk_column("vectr")

    def test_rewriting_a_document_replaces_its_chunks_and_values(self, store):
        store.write([record("a", n_chunks=3, tags=["old"]), record("b")])
        store.write([record("a", text="new", n_chunks=1, tags=["new"])])
        assert store.count_documents() == 2 and store.count_chunks() == 3
        labels, _ = store.vectors()
        a = [c for c in store.chunks(labels) if c["doc_id"] == "a"]
        assert [c["text"] for c in a] == ["new #0"] and a[0]["metadata"]["tags"] == ["new"]

    def test_labels_are_unique_and_untouched_documents_keep_theirs(self, store):
        store.write([record("a"), record("b")])
        labels_b = {c["label"] for c in store.chunks(store.vectors()[0]) if c["doc_id"] == "b"}
        store.write([record("a", text="changed")])
        labels, _ = store.vectors()
        assert len(set(labels.tolist())) == len(labels) == 4
        assert labels_b <= set(labels.tolist())

    def test_labels_of_deleted_chunks_are_never_reused(self, store):
        store.write([record("a"), record("b")])
        top = int(store.vectors()[0].max())
        store.delete(["b"])
        store.write([record("c")])
        new = [c["label"] for c in store.chunks(store.vectors()[0]) if c["doc_id"] == "c"]
        assert min(new) > top

    def test_delete_removes_documents_chunks_and_values(self, store):
        store.write([record("a", tags=["x"]), record("b")])
        assert store.delete(["a", "missing"]) == 1
        assert store.count_documents() == 1 and store.count_chunks() == 2
        assert store.count_matching({"tags": "x"}) == 0

    def test_the_revision_changes_if_and_only_if_content_changes(self, store):
        empty = store.revision()
        store.write([record("a"), record("b")])
        r1 = store.revision()
        store.write([record("a")])
        assert store.revision() == r1 != empty
        store.write([record("a", tenant="other")])
        assert store.revision() != r1

    def test_doc_hashes_give_each_id_its_content_hash(self, store):
        rec = record("a")
        store.write([rec])
        assert store.doc_hashes() == {"a": rec.content_hash}

    def test_meta_values_are_stored_and_overwritten(self, store):
        assert store.get_meta("fingerprint") is None
        store.set_meta("fingerprint", "one")
        store.set_meta("fingerprint", "two")
        assert store.get_meta("fingerprint") == "two"

    def test_collections_in_one_database_are_separate(self, url):
        with Store(url, "first", {}) as a, Store(url, "second kb!", {}) as b:
            a.write([record("a")])
            assert b.count_documents() == 0

    def test_a_wrong_metadata_type_is_refused_naming_the_document(self, store):
        with pytest.raises(StoreError, match="document 'a'.*'year' is int"):
            store.write([record("a", year="2024")])

    def test_using_a_closed_store_says_to_open_it(self, url):
        with pytest.raises(StoreError, match="not open"):
            Store(url, "kb", {}).count_documents()


class TestMigrations:
    def test_a_newly_declared_field_is_added_as_a_column(self, url):
        with Store(url, "kb", parse_fields(FIELDS)) as s:
            s.write([record("a", year=2020)])
        with Store(url, "kb", parse_fields({**FIELDS, "score": "float", "labels": "list[int]"})) as s:
            s.write([record("b", year=2021, score=0.5, labels=[1, 2])])
            assert s.count_matching({"score": {"$gt": 0.1}}) == 2
            assert s.count_matching({"labels": 2}) == 2
            assert s.count_matching({"year": 2020}) == 2

    def test_a_changed_field_type_is_refused_with_the_fix(self, url):
        Store(url, "kb", parse_fields(FIELDS)).open().close()
        with pytest.raises(StoreError, match=r"'year' is int in the store but str in the pipeline; keep it int"):
            Store(url, "kb", parse_fields({"year": "str"})).open()
        with pytest.raises(StoreError, match=r"'tags' is list\[str\] in the store but str"):
            Store(url, "kb", parse_fields({"tags": "str"})).open()

    def test_a_field_no_longer_declared_is_kept(self, url):
        with Store(url, "kb", parse_fields(FIELDS)) as s:
            s.write([record("a", year=2020)])
        with Store(url, "kb", {}) as s:
            assert s.count_documents() == 1
        with Store(url, "kb", parse_fields(FIELDS)) as s:
            assert s.count_matching({"year": 2020}) == 2


CRASH_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from ragcost.config.fields import parse_fields
    from ragcost.records import SourceDocument
    from ragcost.store.store import ChunkRecord, DocumentRecord, Store, content_hash

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
        with Store(url, "kb", parse_fields({"tags": "list[str]"})) as s:
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
