"""A faiss flat index over the real SciFact corpus agrees with an exact cosine search in numpy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragcost.runtime.indexing import run_index
from ragcost.runtime.pipeline import Pipeline
from ragcost.runtime.query import run_queries

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scifact(eval_corpus, tmp_path_factory):
    # The corpus is embedded once per session into the eval cache (shared with `ragcost eval` and every
    # other test that reads SciFact); this pipeline reads that store and only builds its own flat index.
    base, corpus = eval_corpus("scifact")
    cache = corpus.pipeline.config
    folder = tmp_path_factory.mktemp("scifact")
    cfg = {
        "name": "scifact",
        "store": cache.store_url,
        "index_dir": str(folder / "scifact-flat"),
        "source": {"path": cache.source_config.path, "reader": "beir"},
        "chunking": {"size": 254, "overlap": 32},
        "embed": {"model": "all-MiniLM-L6-v2", "batch_size": 64},
        "index": {"backend": "faiss", "kind": "flat"},
        "pricing": str(REPO / "pricing" / "default.yaml"),
        "stages": [{"type": "retrieve", "k": 10}],
    }
    path = folder / "scifact.yaml"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    pipe = Pipeline.load(path)
    pipe.__dict__["embedder"] = base.embedder  # one loaded model
    summary = run_index(pipe)
    assert summary.documents == 5183 and summary.embedded_documents == 0
    queries = [json.loads(line) for line in (Path(cache.source_config.path) / "queries.jsonl").open(encoding="utf-8")]
    yield pipe, queries
    pipe.close()


def _numpy_top10(vectors: np.ndarray, q: np.ndarray) -> np.ndarray:
    scores = vectors @ q
    return np.argsort(-scores, kind="stable")[:10], scores


def test_flat_index_top10_chunks_equal_numpy_exact_cosine(scifact):
    pipe, queries = scifact
    labels, vectors = pipe.store().vectors()
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    qv = pipe.embedder.embed([q["text"] for q in queries])
    art = pipe.artifact()
    _, got = art.index.search(qv, 10)
    for i in range(len(queries)):
        rows, scores = _numpy_top10(vectors, qv[i])
        want = labels[rows]
        if not np.array_equal(got[i], want):
            # Only a tie at the cut may reorder ids: the scores must then be equal to float precision.
            got_scores = scores[np.searchsorted(labels, got[i])]
            np.testing.assert_allclose(np.sort(got_scores), np.sort(scores[rows]), atol=1e-5)


def test_retrieve_stage_top10_documents_equal_numpy_best_chunk_per_document(scifact):
    pipe, queries = scifact
    labels, vectors = pipe.store().vectors()
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    doc_of = {r["label"]: r["doc_id"] for r in pipe.store().chunks(labels.tolist())}
    docs = np.array([doc_of[int(x)] for x in labels])
    sample = queries[:60]
    run = run_queries(pipe, [(q["_id"], q["text"]) for q in sample], write_ledger=False)
    qv = pipe.embedder.embed([q["text"] for q in sample])
    for s, q in zip(run.states, qv):
        scores = vectors @ q
        best: dict[str, float] = {}
        for d, sc in zip(docs, scores):
            if sc > best.get(d, -np.inf):
                best[d] = float(sc)
        want = sorted(best, key=lambda d: (-best[d], d))[:10]
        got = [h.doc_id for h in s.hits]
        assert len(got) == 10
        if got != want:
            np.testing.assert_allclose([best[d] for d in got], [best[d] for d in want], atol=1e-5)
