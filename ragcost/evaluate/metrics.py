"""Relevance metrics from ir-measures (pytrec_eval underneath), and ANN recall against exact search.

nDCG uses the graded qrels as gains (pytrec_eval: gain = score); recall, precision and MRR count
a document relevant when its score is >= 1. Rankings are passed in our order (scores are
``-rank``), so ties are never re-broken by document id. A judged query with no results counts 0.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ragcost.errors import DependencyError

_IR_NAMES = {"ndcg": "nDCG", "recall": "R", "mrr": "RR", "precision": "P"}


def _ir_measures():
    try:
        import ir_measures
    except ImportError as e:  # pragma: no cover - a core dependency
        raise DependencyError("ragcost eval needs ir-measures: pip install ir-measures") from e
    return ir_measures


def measure(name: str):
    """The ir-measures measure for ``ndcg@10``, ``recall@100``, ``mrr@10``, ``precision@5``."""
    base, _, cut = name.partition("@")
    return _ir_measures().parse_measure(f"{_IR_NAMES[base]}@{int(cut)}")


def evaluate(
    ranked: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    names: Sequence[str],
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Mean of each metric over the judged queries, and per metric the per-query values."""
    irm = _ir_measures()
    measures = {measure(n): n for n in names}
    run = {q: {d: float(-r) for r, d in enumerate(docs)} for q, docs in ranked.items() if docs}
    per: dict[str, dict[str, float]] = {n: {q: 0.0 for q in qrels} for n in names}
    for m in irm.iter_calc(list(measures), {q: dict(d) for q, d in qrels.items()}, run):
        per[measures[m.measure]][m.query_id] = float(m.value)
    means = {n: float(np.mean(list(v.values()))) if v else 0.0 for n, v in per.items()}
    return means, per


def binary(qrels: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Every judged-relevant document (score >= 1) as equally relevant (score 1)."""
    return {q: {d: int(s >= 1) for d, s in docs.items()} for q, docs in qrels.items()}


def ann_recall(found_scores: Sequence[np.ndarray], kth: np.ndarray, k: int, n_docs: int, tol: float = 1e-5) -> float:
    """Mean over queries of the share of the exact top-k documents the ANN run found.

    ``found_scores[i]`` are the exact scores (same vectors, full precision) of the documents the ANN
    run returned for query i, best first; ``kth[i]`` is the exact k-th best document score. A
    returned document within ``tol`` of it counts as found, so exact ties never read as misses.
    """
    kk = min(k, n_docs)
    if len(found_scores) == 0 or kk == 0:
        return 1.0
    hits = [float((np.asarray(s[:kk]) >= t - tol).sum()) for s, t in zip(found_scores, kth)]
    return float(np.mean(hits)) / kk


def exact_kth(queries: np.ndarray, vectors: np.ndarray, doc_of: np.ndarray, ks: Sequence[int]) -> dict[int, np.ndarray]:
    """Per k, each query's exact k-th best *document* score (a document scores as its best chunk)."""
    n_docs = int(doc_of.max()) + 1 if len(doc_of) else 0
    perm = np.argsort(doc_of, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(doc_of[perm]) != 0])
    out = {k: np.full(len(queries), -np.inf, np.float32) for k in ks}
    if n_docs == 0:
        return out
    block = max(1, int(5e7 // max(len(vectors), 1)))  # bounds the (block, chunks) scratch to ~200 MB
    vt = np.ascontiguousarray(vectors[perm]).T
    for a in range(0, len(queries), block):
        docs = np.maximum.reduceat(queries[a:a + block] @ vt, starts, axis=1)
        for k in ks:
            kk = min(k, n_docs)
            out[k][a:a + block] = -np.partition(-docs, kk - 1, axis=1)[:, kk - 1]
    return out


def judged_at(tops: dict[str, list[str]], qrels: dict[str, dict[str, int]], k: int) -> float:
    """The share of the top-k documents (over the questions) that carry a judgment, 0 included."""
    seen = judged = 0
    for q, docs in tops.items():
        for d in docs[:k]:
            seen += 1
            judged += d in qrels.get(q, {})
    return judged / seen if seen else 0.0
