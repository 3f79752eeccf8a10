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


def ann_recall(found: Sequence[Sequence[int]], exact_scores: np.ndarray, k: int, tol: float = 1e-5) -> float:
    """Mean over queries of the share of the exact top-k documents the ANN run found.

    ``found`` holds each query's returned document positions (best first); ``exact_scores`` is the
    (queries, documents) exact score matrix on the same vectors. A returned document scoring within
    ``tol`` of the exact k-th score counts as found, so exact ties never read as misses.
    """
    nq, ndocs = exact_scores.shape
    kk = min(k, ndocs)
    if nq == 0 or kk == 0:
        return 1.0
    kth = -np.partition(-exact_scores, kk - 1, axis=1)[:, kk - 1]
    total = 0.0
    for i, docs in enumerate(found):
        top = np.asarray(list(docs)[:kk], dtype=np.int64)
        total += float((exact_scores[i, top] >= kth[i] - tol).sum()) / kk if len(top) else 0.0
    return total / nq
