"""The Retrieve stage: each filter strategy returns the exact top-k ids and says which strategy it used."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.config.index import IndexConfig
from ragcost.cost.usage import UsageRecord
from ragcost.index import LoadedIndex, build_index, exact_search, rows_for_labels
from ragcost.stages.base import QueryState
from ragcost.stages.retrieve import Retrieve, RetrieveParams
from tests.conftest import clustered_vectors

N, DIM, K = 2000, 32, 10
LABELS = (5_000 + np.arange(N) * 3).astype(np.int64)


class FakeStore:
    """chunks(labels) from a dict; matching_labels({"tag": name}) from fixed arrays."""

    def __init__(self, tags: dict[str, np.ndarray]) -> None:
        self.tags = tags
        self.rows = {int(lb): {"label": int(lb), "doc_id": f"d{i // 2}", "chunk_no": i % 2, "title": "", "text": f"t{i}", "metadata": {}}
                     for i, lb in enumerate(LABELS)}

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
        assert {s.notes["strategy"] for s in states} == {"exact"}
        assert ids(states) == truth(data, "few").tolist()
        assert usage.notes["strategies"] == {"exact": len(states)}
        assert all(s.notes["matches"] == 30 for s in states)

    def test_many_matches_use_the_native_filtered_search_with_only_allowed_ids(self, pipe, data):
        states, usage = run(pipe, data[1], "half", exact_below=0.0, exact_max_matches=0)
        assert {s.notes["strategy"] for s in states} <= {"native", "native+exact-fallback"}
        allowed = set(data[2]["half"].tolist())
        found = ids(states)
        assert all(len(r) == K and set(r) <= allowed for r in found)
        exact = truth(data, "half").tolist()
        recall = np.mean([len(set(a) & set(b)) / K for a, b in zip(found, exact)])
        assert recall >= 0.9
        assert sum(usage.notes["strategies"].values()) == len(states)

    def test_forcing_exact_returns_the_exact_top_k_for_many_matches(self, pipe, data):
        states, _ = run(pipe, data[1], "half", exact_below=1.0)
        assert {s.notes["strategy"] for s in states} == {"exact"}
        assert ids(states) == truth(data, "half").tolist()

    def test_a_native_result_short_of_k_falls_back_to_exact_for_that_query_and_says_so(self, pipe, data, monkeypatch):
        index = pipe.artifact().index
        real = index.search

        def short_first_row(q, k, params=None, allowed=None):
            scores, labels = real(q, k, params=params, allowed=allowed)
            if allowed is not None:  # the walk came up one short for the first query
                scores[0, -1], labels[0, -1] = -np.inf, -1
            return scores, labels

        monkeypatch.setattr(index, "search", short_first_row)
        states, usage = run(pipe, data[1], "half", exact_below=0.0, exact_max_matches=0)
        assert states[0].notes["strategy"] == "native+exact-fallback"
        assert ids(states)[0] == truth(data, "half")[0].tolist()
        assert usage.notes["strategies"].get("native+exact-fallback", 0) >= 1

    def test_the_index_own_fallback_is_reported_as_a_fallback(self, pipe, data, monkeypatch):
        index = pipe.artifact().index
        real = index.search

        def index_fell_back(q, k, params=None, allowed=None):
            out = real(q, k, params=params, allowed=allowed)
            index.last_search_fallback, index.last_fallback_rows = allowed is not None, np.array([1])
            return out

        monkeypatch.setattr(index, "search", index_fell_back)
        states, _ = run(pipe, data[1], "half", exact_below=0.0, exact_max_matches=0)
        assert states[1].notes["strategy"] == "native+exact-fallback"

    def test_no_match_is_reported_as_empty(self, pipe, data):
        states, _ = run(pipe, data[1], "none")
        assert all(s.hits == [] and s.notes["strategy"] == "empty" for s in states)

    def test_no_filter_uses_the_index_and_matches_its_own_search(self, pipe, data):
        states, usage = run(pipe, data[1])
        _, lab = pipe.artifact().index.search(data[1], K)
        assert ids(states) == lab.tolist()
        assert usage.notes["strategies"] == {"index": len(states)}

    def test_per_document_keeps_the_best_chunk_of_each_document(self, pipe, data):
        stage = Retrieve(RetrieveParams(k=5, per_document=True), pipe)
        states = [QueryState(text="", k=5, filter={"tag": "few"}, vector=v) for v in data[1]]
        stage.run(states, UsageRecord(stage="retrieve", resource="cpu"))
        for s in states:
            docs = [h.doc_id for h in s.hits]
            assert len(docs) == len(set(docs)) == 5
            assert [h.score for h in s.hits] == sorted((h.score for h in s.hits), reverse=True)

