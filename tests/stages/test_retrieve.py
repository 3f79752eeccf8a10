"""The Retrieve stage: each filter strategy returns the exact top-k ids and says which strategy it used."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.config.index import IndexConfig
from ragcost.records import UsageRecord
from ragcost.index import FilteredResult, LoadedIndex, build_index, exact_search, rows_for_labels
from ragcost.records import QueryState
from ragcost.stages.retrieve import Retrieve, RetrieveParams
from tests.conftest import clustered_vectors

N, DIM, K = 2000, 32, 10
LABELS = (5_000 + np.arange(N) * 3).astype(np.int64)


class FakeStore:
    """chunks(labels) from a dict; matching_labels({"tag": name}) from fixed arrays."""

    def __init__(self, tags: dict[str, np.ndarray], per_doc: int = 2) -> None:
        self.tags = tags
        self.rows = {int(lb): {"label": int(lb), "doc_id": f"d{i // per_doc}", "chunk_no": i % per_doc, "title": "", "text": f"t{i}", "metadata": {}}
                     for i, lb in enumerate(LABELS)}

    def chunk_column(self, name):
        labels = sorted(self.rows)
        return np.asarray(labels, dtype=np.int64), [self.rows[x][name] for x in labels]

    def chunks(self, labels):
        return [self.rows[x] for x in labels if x in self.rows]

    def matching_labels(self, expr):
        return self.tags[expr["tag"]]


class FakePipeline:
    def __init__(self, art: LoadedIndex, store: FakeStore) -> None:
        self._art, self._store, self.index_config = art, store, art.index.config

    def artifact(self):
        return self._art

    def store(self):
        return self._store


@pytest.fixture(scope="module")
def data():
    x, _ = clustered_vectors(N, DIM, seed=3)
    rng = np.random.default_rng(4)
    q = x[rng.choice(N, 8, replace=False)] + 0.05 * rng.standard_normal((8, DIM)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    tags = {
        "half": np.sort(rng.choice(LABELS, N // 2, replace=False)),
        "few": np.sort(rng.choice(LABELS, 30, replace=False)),
        "three": np.sort(rng.choice(LABELS, 3, replace=False)),
        "none": np.empty(0, np.int64),
    }
    return x, q, tags


@pytest.fixture(scope="module", params=["hnswlib", "faiss-hnsw", "faiss-ivf_flat"])
def pipe(request, data):
    x, _, tags = data
    spec = {
        "hnswlib": {"backend": "hnswlib", "kind": "hnsw", "search": {"ef": 200}},
        "faiss-hnsw": {"backend": "faiss", "kind": "hnsw", "search": {"ef": 200}},
        "faiss-ivf_flat": {"backend": "faiss", "kind": "ivf_flat", "build": {"nlist": 8}, "search": {"nprobe": 8}},
    }[request.param]
    cfg = IndexConfig.model_validate(spec)
    art = LoadedIndex(index=build_index(cfg, x, LABELS), labels=LABELS, vectors=x, manifest=None)
    return FakePipeline(art, FakeStore(tags))


def run(pipe, q, tag=None, **params):
    stage = Retrieve(RetrieveParams(k=K, per_document=False, **params), pipe)
    states = [QueryState(text="", k=K, filter={"tag": tag} if tag else None, vector=v) for v in q]
    usage = UsageRecord(stage="retrieve", resource="cpu", items=len(states))
    stage.run(states, usage)
    return states, usage


def truth(data, tag):
    x, q, tags = data
    rows = rows_for_labels(LABELS, tags[tag])
    return exact_search(x, LABELS, q, K, rows=rows)[1]


def ids(states):
    return [[h.label for h in s.hits] for s in states]


class TestRetrieveStrategies:
    def test_few_matches_are_scanned_exactly_and_return_the_exact_top_k(self, pipe, data):
        states, usage = run(pipe, data[1], "few")
        assert {s.strategy for s in states} == {"exact"}
        assert ids(states) == truth(data, "few").tolist()
        assert usage.strategies == {"exact": len(states)}
        assert all(s.matches == 30 for s in states)

    def test_many_matches_use_the_native_filtered_search_with_only_allowed_ids(self, pipe, data):
        states, usage = run(pipe, data[1], "half", exact_below=0.0, exact_max_matches=0)
        assert {s.strategy for s in states} <= {"native", "native+exact-fallback"}
        allowed = set(data[2]["half"].tolist())
        found = ids(states)
        assert all(len(r) == K and set(r) <= allowed for r in found)
        exact = truth(data, "half").tolist()
        recall = np.mean([len(set(a) & set(b)) / K for a, b in zip(found, exact)])
        assert recall >= 0.9
        assert sum(usage.strategies.values()) == len(states)

    def test_forcing_exact_returns_the_exact_top_k_for_many_matches(self, pipe, data):
        states, _ = run(pipe, data[1], "half", exact_below=1.0)
        assert {s.strategy for s in states} == {"exact"}
        assert ids(states) == truth(data, "half").tolist()

    def test_a_native_result_short_of_k_falls_back_to_exact_for_that_query_and_says_so(self, pipe, data, monkeypatch):
        index = pipe.artifact().index
        real = index.search_filtered

        def short_first_row(q, k, params, allowed):
            scores, labels, rows = real(q, k, params, allowed)
            scores[0, -1], labels[0, -1] = -np.inf, -1  # the walk came up one short for the first query
            return FilteredResult(scores, labels, rows)

        monkeypatch.setattr(index, "search_filtered", short_first_row)
        states, usage = run(pipe, data[1], "half", exact_below=0.0, exact_max_matches=0)
        assert states[0].strategy == "native+exact-fallback"
        assert ids(states)[0] == truth(data, "half")[0].tolist()
        assert usage.strategies.get("native+exact-fallback", 0) >= 1

    def test_the_index_own_fallback_is_reported_as_a_fallback(self, pipe, data, monkeypatch):
        index = pipe.artifact().index
        real = index.search_filtered

        def index_fell_back(q, k, params, allowed):
            scores, labels, _ = real(q, k, params, allowed)
            return FilteredResult(scores, labels, np.array([1]))  # the index scored row 1 exactly

        monkeypatch.setattr(index, "search_filtered", index_fell_back)
        states, _ = run(pipe, data[1], "half", exact_below=0.0, exact_max_matches=0)
        assert states[1].strategy == "native+exact-fallback"

    def test_no_match_is_reported_as_empty(self, pipe, data):
        states, _ = run(pipe, data[1], "none")
        assert all(s.hits == [] and s.strategy == "empty" for s in states)

    def test_no_filter_uses_the_index_and_matches_its_own_search(self, pipe, data):
        states, usage = run(pipe, data[1])
        _, lab = pipe.artifact().index.search(data[1], K)
        assert ids(states) == lab.tolist()
        assert usage.strategies == {"index": len(states)}

    def test_per_document_keeps_the_best_chunk_of_each_document(self, pipe, data):
        stage = Retrieve(RetrieveParams(k=5, per_document=True), pipe)
        states = [QueryState(text="", k=5, filter={"tag": "few"}, vector=v) for v in data[1]]
        stage.run(states, UsageRecord(stage="retrieve", resource="cpu"))
        for s in states:
            docs = [h.doc_id for h in s.hits]
            assert len(docs) == len(set(docs)) == 5
            assert [h.score for h in s.hits] == sorted((h.score for h in s.hits), reverse=True)

class CountingStore(FakeStore):
    def __init__(self, tags, per_doc: int = 2) -> None:
        super().__init__(tags, per_doc)
        self.chunk_calls = 0

    def chunks(self, labels):
        self.chunk_calls += 1
        return super().chunks(labels)


class TestResultsAndChunkText:
    @pytest.fixture()
    def counting(self, data):
        x, _, tags = data
        cfg = IndexConfig.model_validate({"backend": "faiss", "kind": "flat"})
        art = LoadedIndex(index=build_index(cfg, x, LABELS), labels=LABELS, vectors=x, manifest=None)
        return FakePipeline(art, CountingStore(tags))

    @pytest.fixture()
    def grouped(self, data):
        """Neighbouring vectors share a document (25 chunks each): 4k candidates often hold fewer than k documents."""
        x, _, tags = data
        order = np.argsort(x[:, 0])  # a crude 1-d clustering, so a document's chunks are alike
        cfg = IndexConfig.model_validate({"backend": "faiss", "kind": "flat"})
        art = LoadedIndex(index=build_index(cfg, x[order], LABELS), labels=LABELS, vectors=x[order], manifest=None)
        return FakePipeline(art, CountingStore(tags, per_doc=25))

    def test_fetch_text_reads_the_store_once_per_batch_inside_the_stage(self, counting, data):
        stage = Retrieve(RetrieveParams(k=K, per_document=False), counting)
        stage.warm_up()
        states = [QueryState(text="", k=K, vector=v) for v in data[1]]
        stage.run(states, UsageRecord(stage="retrieve", resource="cpu"))
        assert counting.store().chunk_calls == 1
        rows = counting.store().rows
        assert all(h.text == rows[h.label]["text"] and h.chunk_no == rows[h.label]["chunk_no"] for s in states for h in s.hits)
        assert counting.store().chunk_calls == 1

    def test_without_fetch_text_the_first_read_fetches_the_whole_batch_once(self, counting, data):
        stage = Retrieve(RetrieveParams(k=K, per_document=False, fetch_text=False), counting)
        states = [QueryState(text="", k=K, vector=v) for v in data[1]]
        stage.run(states, UsageRecord(stage="retrieve", resource="cpu"))
        assert counting.store().chunk_calls == 0
        assert [s.hit_count for s in states] == [K] * len(states)
        rows = counting.store().rows
        assert [h.doc_id for h in states[0].hits] == [rows[h.label]["doc_id"] for h in states[0].hits]
        assert counting.store().chunk_calls == 0  # ids and scores need no store
        assert states[0].hits[0].text == rows[states[0].hits[0].label]["text"]
        assert all(h.text for s in states for h in s.hits)
        assert counting.store().chunk_calls == 1

    def test_a_field_set_before_the_fill_is_not_overwritten_by_it(self, counting, data):
        stage = Retrieve(RetrieveParams(k=K, per_document=False, fetch_text=False), counting)
        states = [QueryState(text="", k=K, vector=v) for v in data[1][:2]]
        stage.run(states, UsageRecord(stage="retrieve", resource="cpu"))
        h = states[0].hits[0]
        h.text = "[redacted]"
        assert h.text == "[redacted]"
        assert states[1].hits[0].title == "" and states[1].hits[0].text.startswith("t")

    def test_hits_can_be_replaced_and_appended_to(self, counting, data):
        stage = Retrieve(RetrieveParams(k=K, per_document=False), counting)
        states = [QueryState(text="", k=K, vector=v) for v in data[1][:1]]
        stage.run(states, UsageRecord(stage="retrieve", resource="cpu"))
        first = states[0].hits[0]
        states[0].hits = []
        states[0].hits.append(first)
        assert states[0].hits == [first] and states[0].hit_count == 1


    def test_per_document_equals_a_python_collapse_of_the_same_candidates(self, grouped, data):
        counting = grouped
        stage = Retrieve(RetrieveParams(k=K, per_document=True), counting)
        states = [QueryState(text="", k=k, vector=v) for k, v in zip([3, K, 7, 1, K, 5, 2, K], data[1])]
        stage.run(states, UsageRecord(stage="retrieve", resource="cpu"))
        scores, labels = counting.artifact().index.search(data[1], N)  # every chunk, in the (exact) index's order
        rows = counting.store().rows
        for s, lab in zip(states, labels.tolist()):
            want, seen = [], set()
            for lb in lab:
                d = rows[lb]["doc_id"] if lb >= 0 else None
                if d is not None and d not in seen:
                    seen.add(d)
                    want.append(lb)
            assert [h.label for h in s.hits] == want[: s.k]
        assert max(len({h.doc_id for h in s.hits}) for s in states) == K


class TestDocMap:
    def test_dense_and_sparse_label_spaces_map_alike_and_unknown_labels_to_minus_one(self):
        from ragcost.stages.retrieve import DocMap

        docs = ["a", "b", "a", "c", "b"]
        dense = DocMap(np.array([3, 4, 7, 8, 10]), docs)
        sparse = DocMap(np.array([3, 4, 7, 8, 10]) * 10**12, docs)
        assert dense._dense is not None and sparse._dense is None
        q = np.array([[3, 7, -1, 5, 99], [10, 8, 4, 3, 11]])
        d, s = dense.ords(q), sparse.ords(np.where(q >= 0, q * 10**12, -1))
        named = lambda m, o: [[m.names[x] if x >= 0 else None for x in row] for row in o.tolist()]  # noqa: E731
        assert named(dense, d) == named(sparse, s) == [["a", "a", None, None, None], ["b", "c", "b", "a", None]]
