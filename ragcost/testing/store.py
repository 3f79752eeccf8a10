"""The DocumentStore contract: every store backend's test class inherits it (Haystack's DocumentStoreBaseTests style).

A subclass provides one fixture, ``open_collection``: a callable ``(fields, collection="kb")``
returning an opened store on the same fresh database each time it is called in a test, and
closing what it opened afterwards. Everything else here is what callers rely on.
"""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.config.fields import parse_fields
from ragcost.errors import FilterError, RagcostError, StoreError
from ragcost.records import SourceDocument
from ragcost.store import ChunkRecord, DocumentRecord, DocumentStore, content_hash

FIELDS = {"tenant": "str", "year": "int", "score": "float", "tags": "list[str]", "ranks": "list[int]"}
DIM = 8


def record(doc_id: str, text: str = "hello", n_chunks: int = 2, seed: int = 0, **meta) -> DocumentRecord:
    rng = np.random.default_rng(seed)
    doc = SourceDocument(id=doc_id, text=text, title=f"T {doc_id}", metadata=meta)
    chunks = [ChunkRecord(f"{text} #{i}", i, i + 1, 3, rng.standard_normal(DIM).astype(np.float32)) for i in range(n_chunks)]
    return DocumentRecord(doc, content_hash(doc), chunks)


def doc_ids(store, expr) -> set[str]:
    return {c["doc_id"] for c in store.chunks(store.matching_labels(expr))}


def one_line(err: BaseException) -> str:
    msg = str(err)
    assert "\n" not in msg and "SELECT" not in msg.upper() and "INSERT" not in msg.upper(), msg
    return msg


class StoreContract:
    @pytest.fixture
    def open_collection(self):
        raise NotImplementedError("a store's test class provides open_collection(fields, collection='kb')")

    @pytest.fixture
    def store(self, open_collection):
        return open_collection(parse_fields(FIELDS))

    # -- the protocol -----------------------------------------------------------------------

    def test_the_store_implements_the_document_store_protocol(self, store):
        assert isinstance(store, DocumentStore)

    def test_a_written_document_reads_back_with_metadata_and_chunks(self, store):
        store.write([record("a", tenant="acme", year=2024, score=0.5, tags=["x", "y"], ranks=[3])])
        assert store.count_documents() == 1 and store.count_chunks() == 2
        got = store.chunks(store.vectors()[0])
        assert [c["chunk_no"] for c in got] == [0, 1]
        assert got[0]["doc_id"] == "a" and got[0]["title"] == "T a" and got[0]["text"] == "hello #0"
        assert got[0]["metadata"] == {"tenant": "acme", "year": 2024, "score": 0.5, "tags": ["x", "y"], "ranks": [3]}

    def test_chunks_come_back_in_the_order_of_the_labels_given(self, store):
        store.write([record("a"), record("b")])
        order = store.vectors()[0][::-1].tolist()
        assert [c["label"] for c in store.chunks(order + [10**15])] == order  # an unknown label is dropped

    def test_vectors_round_trip_exactly_as_int64_labels_and_float32_rows(self, store):
        recs = [record(str(i), seed=i, n_chunks=3) for i in range(5)]
        store.write(recs)
        labels, vecs = store.vectors()
        assert labels.dtype == np.int64 and vecs.dtype == np.float32 and vecs.shape == (15, DIM)
        assert np.all(np.diff(labels) > 0)
        np.testing.assert_array_equal(vecs, np.stack([c.vector for r in recs for c in r.chunks]))

    def test_an_empty_store_has_no_vectors(self, store):
        labels, vecs = store.vectors()
        assert labels.shape == (0,) and vecs.shape[0] == 0 and labels.dtype == np.int64

    def test_vectors_for_and_chunk_column_read_parts_of_the_same_rows(self, store):
        store.write([record(str(i), seed=i, n_chunks=2) for i in range(3)])
        labels, vecs = store.vectors()
        got = store.vectors_for([int(labels[4]), int(labels[1]), 10**15, 2**70])
        assert set(got) == {int(labels[4]), int(labels[1])}  # unknown labels are absent
        np.testing.assert_array_equal(got[int(labels[4])], vecs[4])
        col_labels, texts = store.chunk_column("text")
        np.testing.assert_array_equal(col_labels, labels)
        assert texts == [c["text"] for c in store.chunks(labels)]
        assert store.chunk_column("doc_id")[1] == ["0", "0", "1", "1", "2", "2"]
        with pytest.raises(StoreError, match="no column 'vectr'"):
            store.chunk_column("vectr")

    # -- writes: replace, all or nothing, labels -------------------------------------------

    def test_rewriting_a_document_replaces_its_chunks_and_values(self, store):
        store.write([record("a", n_chunks=3, tags=["old"]), record("b")])
        store.write([record("a", text="new", n_chunks=1, tags=["new"])])
        assert store.count_documents() == 2 and store.count_chunks() == 3
        a = [c for c in store.chunks(store.vectors()[0]) if c["doc_id"] == "a"]
        assert [c["text"] for c in a] == ["new #0"] and a[0]["metadata"]["tags"] == ["new"]
        assert doc_ids(store, {"tags": "old"}) == set()

    def test_a_batch_with_one_bad_document_writes_nothing(self, store):
        store.write([record("a", year=2020)])
        before = (store.revision(), store.count_chunks())
        with pytest.raises(StoreError, match="document 'c'") as info:
            store.write([record("a", text="changed"), record("b"), record("c", year="2024")])
        one_line(info.value)
        assert (store.revision(), store.count_chunks()) == before

    def test_vectors_of_another_dimension_are_refused(self, store):
        store.write([record("a")])
        doc = SourceDocument(id="b", text="x")
        bad = DocumentRecord(doc, content_hash(doc), [ChunkRecord("x", 0, 1, 1, np.zeros(DIM + 1, np.float32))])
        with pytest.raises(StoreError, match=f"{DIM + 1} dims"):
            store.write([bad])
        assert store.count_documents() == 1

    def test_labels_are_unique_and_untouched_documents_keep_theirs(self, store):
        store.write([record("a"), record("b")])
        labels_b = {c["label"] for c in store.chunks(store.vectors()[0]) if c["doc_id"] == "b"}
        store.write([record("a", text="changed")])
        labels = store.vectors()[0]
        assert len(set(labels.tolist())) == len(labels) == 4
        assert labels_b <= set(labels.tolist())

    def test_labels_of_deleted_chunks_are_never_reused(self, store):
        store.write([record("a"), record("b")])
        top = int(store.vectors()[0].max())
        store.delete(["b"])
        store.write([record("c")])
        assert min(c["label"] for c in store.chunks(store.vectors()[0]) if c["doc_id"] == "c") > top

    def test_delete_removes_documents_chunks_and_values(self, store):
        store.write([record("a", tags=["x"]), record("b")])
        assert store.delete(["a", "missing"]) == 1
        assert store.count_documents() == 1 and store.count_chunks() == 2
        assert doc_ids(store, {"tags": "x"}) == set()
        assert store.delete([]) == 0

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

    def test_collections_in_one_database_are_separate(self, open_collection):
        a, b = open_collection({}, "first"), open_collection({}, "second kb!")
        a.write([record("a")])
        assert b.count_documents() == 0

    # -- typed metadata and filters ---------------------------------------------------------

    def test_a_wrong_metadata_type_is_refused_naming_the_document(self, store):
        with pytest.raises(StoreError, match="document 'a'.*'year' is int"):
            store.write([record("a", year="2024")])

    @pytest.mark.parametrize("meta, message", [
        ({"year": 2**63}, r"'year' is int \(64-bit\); 9223372036854775808 is outside"),
        ({"ranks": [1, -(2**63) - 1]}, r"'ranks' is list\[int\] \(64-bit\)"),
        ({"score": float("nan")}, r"'score' is float; nan is not a finite float"),
        ({"score": float("inf")}, r"'score' is float; inf is not a finite float"),
        ({"score": 10**400}, r"'score' is float; .* is not a finite float"),
        ({"tenant": "a\x00b"}, r"'tenant'.*NUL"),
    ])
    def test_a_metadata_value_no_store_can_hold_is_refused_in_one_line(self, store, meta, message):
        with pytest.raises(StoreError, match=message) as info:
            store.write([record("a", text="SECRET body", **meta)])
        assert "SECRET" not in one_line(info.value)
        assert store.count_documents() == 0

    def test_a_lone_surrogate_in_document_text_is_one_line_and_writes_nothing(self, store):
        with pytest.raises(StoreError, match="writing 1 documents: a text holds a lone surrogate") as info:
            store.write([record("a", text="bad \ud800 SECRET")])
        assert "SECRET" not in one_line(info.value)
        assert store.count_documents() == 0

    @pytest.mark.parametrize("expr, expected", [
        ({"tenant": "acme"}, {"a", "b"}),
        ({"tenant": {"$ne": "acme"}}, {"c", "d"}),
        ({"year": {"$gte": 2023}}, {"b", "c"}),
        ({"score": {"$lt": 1.0}}, {"a"}),
        ({"tags": {"$all": ["x", "y"]}}, {"a"}),
        ({"tags": {"$in": ["y", "z"]}}, {"a", "c"}),
        ({"ranks": {"$gt": 2}}, {"b"}),
        ({"$or": [{"year": 2021}, {"tags": "z"}]}, {"a", "c"}),
        ({"$not": {"tenant": "acme"}}, {"c", "d"}),
        ({"year": {"$exists": False}}, {"d"}),
        (None, {"a", "b", "c", "d"}),
    ])
    def test_a_filter_matches_the_documents_with_those_typed_values(self, store, expr, expected):
        store.write([record("a", tenant="acme", year=2021, score=0.5, tags=["x", "y"], ranks=[1]),
                     record("b", tenant="acme", year=2023, score=1.5, tags=["x"], ranks=[3]),
                     record("c", tenant="globex", year=2024, tags=["z"]), record("d")])
        assert doc_ids(store, expr) == expected
        labels = store.matching_labels(expr)
        assert labels.dtype == np.int64 and list(labels) == sorted(labels)

    def test_all_with_a_thousand_values_is_one_term_not_a_thousand(self, store):
        store.write([record("a", tags=[f"v{i}" for i in range(1000)]), record("b", tags=["v1"])])
        assert doc_ids(store, {"tags": {"$all": [f"v{i}" for i in range(1000)]}}) == {"a"}
        assert doc_ids(store, {"tags": {"$all": [f"v{i}" for i in range(1001)]}}) == set()

    @pytest.mark.parametrize("expr, message", [
        ({"year": 2**63}, r"filter \$eq: field 'year' is int \(64-bit\); 9223372036854775808 is outside"),
        ({"ranks": {"$in": [2**64]}}, r"filter \$in: field 'ranks' is int \(64-bit\)"),
        ({"score": {"$gt": float("nan")}}, r"filter \$gt: field 'score' is float; nan is not a finite float"),
        ({"tenant": {"$in": ["x"] * 10_001}}, r"\$in on field 'tenant' has 10,001 values; the limit is 10,000"),
    ])
    def test_a_filter_value_no_store_can_hold_is_a_one_line_filter_error(self, store, expr, message):
        store.write([record("a", year=1)])
        with pytest.raises(FilterError, match=message) as info:
            store.matching_labels(expr)
        assert len(one_line(info.value)) < 300

    def test_two_hundred_list_conditions_run_and_more_are_one_line_asking_for_in(self, store):
        store.write([record(f"d{i}", tags=[f"t{i}"]) for i in range(3)])
        assert doc_ids(store, {"$or": [{"tags": f"t{i}"} for i in range(200)]}) == {"d0", "d1", "d2"}
        with pytest.raises(FilterError, match=r"more than 200 conditions on list fields; combine them, e\.g\. "
                                              r'\{"tags": \{"\$in": \[\.\.\.\]\}\}') as info:
            store.matching_labels({"$or": [{"tags": f"t{i}"} for i in range(201)]})
        one_line(info.value)
        with pytest.raises(FilterError, match=r"more than 1000 conditions; use \$in"):
            store.matching_labels({"$or": [{"tenant": f"t{i}"} for i in range(1001)]})

    def test_a_long_hostile_string_value_is_a_plain_value_that_matches_nothing(self, store):
        store.write([record("a", tenant="acme")])
        assert doc_ids(store, {"tenant": "x" * 5000 + "'\n; DROP TABLE x"}) == set()

    def test_a_filter_nested_deeper_than_the_limit_is_one_line_not_a_recursion_error(self, store):
        expr: dict = {"year": 1}
        for _ in range(200):
            expr = {"$not": expr}
        with pytest.raises(FilterError, match="filter nests deeper than 32 levels; flatten it"):
            store.matching_labels(expr)
        with pytest.raises(FilterError, match="nests deeper than 32"):
            store.matching_labels('{"$and": [' * 5000 + "{}" + "]}" * 5000)

    # -- migrations -------------------------------------------------------------------------

    def test_a_newly_declared_field_is_added(self, open_collection):
        open_collection(parse_fields(FIELDS)).write([record("a", year=2020)])
        s = open_collection(parse_fields({**FIELDS, "rank": "float", "labels": "list[int]"}))
        s.write([record("b", year=2021, rank=0.5, labels=[1, 2])])
        assert doc_ids(s, {"rank": {"$gt": 0.1}}) == {"b"}
        assert doc_ids(s, {"labels": 2}) == {"b"}
        assert doc_ids(s, {"year": {"$gte": 2020}}) == {"a", "b"}

    def test_a_changed_field_type_is_refused_with_the_fix(self, open_collection):
        open_collection(parse_fields(FIELDS))
        with pytest.raises(StoreError, match=r"'year' is int in the store but str in the pipeline; keep it int"):
            open_collection(parse_fields({"year": "str"}))
        with pytest.raises(StoreError, match=r"'tags' is list\[str\] in the store but str"):
            open_collection(parse_fields({"tags": "str"}))

    def test_a_field_no_longer_declared_is_kept(self, open_collection):
        open_collection(parse_fields(FIELDS)).write([record("a", year=2020)])
        assert open_collection({}).count_documents() == 1
        assert doc_ids(open_collection(parse_fields(FIELDS)), {"year": 2020}) == {"a"}

    def test_every_store_error_is_a_ragcost_error(self):
        assert issubclass(StoreError, RagcostError) and issubclass(FilterError, RagcostError)
