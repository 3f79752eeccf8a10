"""Per-document scoring: the best chunk alone (ragcost's collapse) against the best chunk plus a bonus
for a second matching chunk, on real relevance judgements.

    python -m bench.doc_scoring [--datasets scifact,cranfield --weights 0.02,0.05,0.1,0.2]

Each dataset is embedded through `ragcost eval`'s own cache (the pipeline in pipelines/<name>.yaml,
its default chunking, .ragcost/eval/), so a later `ragcost eval` reuses the vectors and the
reverse. Exact (flat) scores of every query against every chunk; a document scores

- ``max``: its best chunk (what the retrieve stage and `ragcost eval` rank by);
- ``max+w*second``: best + w x its second-best chunk (0 for a one-chunk document);
- ``max+w*relu(second-kth)``: best + w x how far the second-best chunk clears the query's
  10th-best document score (a bonus only for a second chunk that would itself rank in the top 10);
- ``first window``: its first chunk alone, i.e. one passage per document (what MTEB and BEIR
  embed: the text truncated at the model's window), the baseline chunking must not fall below.

nDCG@10 by ir-measures, as `ragcost eval` computes it; the ``max`` row must equal the eval's flat
figure. Weights are not tuned here to any target: every row is printed, and a rule is worth
keeping only if it helps on both collections.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import common as C

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"


def doc_top2(scores: np.ndarray, doc_of: np.ndarray, n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """(q, n_docs) best and second-best chunk score of each document (-inf / 0 where missing)."""
    q = scores.shape[0]
    order = np.lexsort((-scores, np.broadcast_to(doc_of, scores.shape)), axis=1)  # by doc, best first
    d = doc_of[order]
    s = np.take_along_axis(scores, order, axis=1)
    first = np.ones_like(d, dtype=bool)
    first[:, 1:] = d[:, 1:] != d[:, :-1]
    second = np.zeros_like(first)
    second[:, 1:] = first[:, :-1] & ~first[:, 1:]
    best = np.full((q, n_docs), -np.inf, dtype=np.float64)
    sec = np.zeros((q, n_docs), dtype=np.float64)
    rows = np.broadcast_to(np.arange(q)[:, None], d.shape)
    best[rows[first], d[first]] = s[first]
    sec[rows[second], d[second]] = s[second]
    has2 = np.zeros((q, n_docs), dtype=bool)
    has2[rows[second], d[second]] = True
    return best, np.where(has2, sec, np.nan)


def ndcg(agg: np.ndarray, qids: list[str], doc_ids: list[str], qrels: dict, k: int = 10) -> float:
    from ragcost.evaluate.metrics import evaluate

    top = np.argsort(-agg, axis=1, kind="stable")[:, :k]
    ranked = {q: [doc_ids[j] for j in top[i]] for i, q in enumerate(qids)}
    means, _ = evaluate(ranked, qrels, ["ndcg@10"])
    return round(means["ndcg@10"], 4)


def run_dataset(name: str, weights: list[float]) -> dict[str, Any]:
    from ragcost.evaluate.datasets import load_dataset
    from ragcost.evaluate.vectors import embed_corpus, embed_queries
    from ragcost.runtime.pipeline import Pipeline

    path = DATA / name
    pipe = Pipeline.load(ROOT / "pipelines" / f"{name}.yaml", judge=False)
    try:
        pipe.embedder.warm_up()
        corpus = embed_corpus(pipe, path)
        ds = load_dataset(path, corpus.doc_ids)
        queries = dict(ds.queries)
        qrels = {q: ds.qrels[q] for q in queries}
        qv = embed_queries(pipe, queries, path)
        qpos = {q: i for i, q in enumerate(qv.ids)}
        qids = list(queries)
        Q = qv.vectors[[qpos[q] for q in qids]]
        _, chunk_no = corpus.pipeline.store().chunk_column("chunk_no")  # same labels, same order as the vectors
    finally:
        pipe.close()
    S = Q.astype(np.float32) @ corpus.vectors.T
    n_docs = len(corpus.doc_ids)
    first = np.asarray(chunk_no) == 0
    one = np.full((S.shape[0], n_docs), -np.inf)
    one[:, corpus.doc_of[first]] = S[:, first]
    best, second = doc_top2(S, corpus.doc_of, n_docs)
    multi = int(np.sum(np.bincount(corpus.doc_of, minlength=n_docs) > 1))
    kth = np.sort(best, axis=1)[:, -10][:, None]
    sec0 = np.nan_to_num(second, nan=0.0)
    rows = {"max": ndcg(best, qids, corpus.doc_ids, qrels), "first window": ndcg(one, qids, corpus.doc_ids, qrels)}
    for w in weights:
        rows[f"max+{w}*second"] = ndcg(best + w * sec0, qids, corpus.doc_ids, qrels)
        rows[f"max+{w}*relu(second-kth)"] = ndcg(best + w * np.maximum(sec0 - kth, 0.0), qids, corpus.doc_ids, qrels)
    return {"documents": n_docs, "chunks": len(corpus.labels), "documents_with_2+_chunks": multi,
            "queries": len(qids), "chunking": list(pipe.chunking()), "title": pipe.config.chunking.title,
            "ndcg@10": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="scifact,cranfield")
    ap.add_argument("--weights", default="0.02,0.05,0.1,0.2")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    weights = [float(w) for w in args.weights.split(",")]
    data = {name: run_dataset(name, weights) for name in args.datasets.split(",")}
    result = {"benchmark": "doc_scoring", "machine": C.machine(), "datasets": data,
              "seconds": round(time.perf_counter() - t0, 1)}
    C.emit(result)
    return result


if __name__ == "__main__":
    main()
