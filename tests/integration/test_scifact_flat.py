"""A faiss flat index over real SciFact documents agrees with an exact cosine search in numpy.

The suite's sample of SciFact (tests/datasets.py: 1,500 of its 5,183 abstracts, every judged one and the
BM25 near-misses of each query) is embedded with the fastest runtime that reproduces the reference: torch
computing in bfloat16 on a CPU that has it natively (2.8x float32's texts/s here), else ONNX Runtime with
dynamic int8 weights (1.6-1.9x), checked against torch float32's nDCG@10 on the same flat search within the
0.01 the embeddings issue allows. The numpy comparisons hold for any runtime's vectors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragcost.runtime.indexing import run_index
from ragcost.runtime.pipeline import Pipeline
from ragcost.runtime.query import run_queries
from tests.conftest import EVAL_CACHE, fastest_runtime
from tests.datasets import SAMPLE_SIZE, scifact_sample

REPO = Path(__file__).resolve().parents[2]
# torch float32's flat nDCG@10 on the sample at the default chunking (254/32, tail: align, title: every_chunk), measured
# with `ragcost eval` of eval/scifact-runtimes.yaml's embedders over the sample's folder (`python -m tests.datasets`
# prints it): torch float32 0.7108, bfloat16 0.7089, ONNX int8 0.7029, 3,184 chunks. The whole corpus: 0.6600
# (docs/tasks/embedding-runtimes.md). The runtime must stay within 0.01 of it.
TORCH_NDCG = 0.7108


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scifact(shared_data, tmp_path_factory):
    # `ragcost eval` over the SciFact sample with that embedder fills the eval cache (once per machine: a rerun
    # embeds nothing); this pipeline reads that store and only builds its own flat index.
    from ragcost.evaluate.grid import variants
    from ragcost.evaluate.run import run_eval
    from ragcost.evaluate.spec import load_spec
    from ragcost.evaluate.vectors import cache_key

    runtime = fastest_runtime()
    folder = tmp_path_factory.mktemp("scifact")
    spec = folder / "scifact-fast.yaml"
    spec.write_text(json.dumps({"pipeline": str(REPO / "pipelines" / "scifact.yaml"), "dataset": str(scifact_sample(shared_data)),
                                "k": [10], "embedders": [runtime], "grid": [{"index": str(REPO / "indexes" / "flat.yaml")}],
                                "served_rounds": 1}))
    ls = load_spec(spec)
    run = run_eval(ls, EVAL_CACHE, traffic="64")  # quality only is read: the served path in batches and timed once
    base = Pipeline.load(ls.pipeline_path, judge=False)
    (v,) = variants(ls.spec, base)
    cfg = {
        "name": "scifact",
        "store": f"duckdb:///{EVAL_CACHE / (cache_key(v.pipe, ls.dataset_path) + '.duckdb')}",
        "index_dir": str(folder / "scifact-flat"),
        "source": {"path": str(ls.dataset_path), "reader": "beir"},
        "chunking": {"size": 254, "overlap": 32},
        "embed": {"model": "all-MiniLM-L6-v2", "batch_size": 64, **runtime},
        "index": {"backend": "faiss", "kind": "flat"},
        "pricing": str(REPO / "pricing" / "default.yaml"),
        "stages": [{"type": "retrieve", "k": 10}],
    }
    path = folder / "scifact.yaml"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    pipe = Pipeline.load(path)
    pipe.__dict__["embedder"] = v.pipe.embedder  # one loaded model
    summary = run_index(pipe)
    assert summary.documents == SAMPLE_SIZE and summary.embedded_documents == 0
    queries = [json.loads(line) for line in (ls.dataset_path / "queries.jsonl").open(encoding="utf-8")]
    yield pipe, queries, run
    pipe.close()
    if v.pipe is not base:
        v.pipe.close()
    base.close()


def test_the_faster_runtime_reproduces_torchs_ndcg_within_the_tolerance(scifact):
    (r,) = scifact[2].ok()
    print(f"scifact flat d384 nDCG@10 {r.embed} {r.metrics['ndcg@10']:.4f} (torch float32 {TORCH_NDCG})")
    assert r.metrics["ann_recall@10"] == 1.0
    assert abs(r.metrics["ndcg@10"] - TORCH_NDCG) <= 0.01


def _numpy_top10(vectors: np.ndarray, q: np.ndarray) -> np.ndarray:
    scores = vectors @ q
    return np.argsort(-scores, kind="stable")[:10], scores


def test_flat_index_top10_chunks_equal_numpy_exact_cosine(scifact):
    pipe, queries, _ = scifact
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
    pipe, queries, _ = scifact
    labels, vectors = pipe.store().vectors()
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    doc_of = {r["label"]: r["doc_id"] for r in pipe.store().chunks(labels.tolist())}
    docs = np.array([doc_of[int(x)] for x in labels])
    sample = queries[:60]
    run = run_queries(pipe, [(q["_id"], q["text"]) for q in sample], write_ledger=False)
    # the vectors the stage searched with: a bfloat16 or int8 vector depends on the batch it was embedded in
    qv = np.vstack([s.vector for s in run.states])
    alone = pipe.embedder.embed([q["text"] for q in sample])
    assert float(np.min(np.sum(qv * alone, axis=1))) > 0.98  # the same queries, embedded in other batches
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
