"""Fit the expected-useful judge on qrels, and measure it on queries the fit did not see.

Input per query: its final documents' features (``ragcost.cost.calibration.features_of``) and
whether the qrels call each relevant (graded score >= 1). Candidate models, fitted by
scikit-learn: isotonic regression on the score, logistic regression on the score, and logistic
regression on score + gap to the top + log rank. The one with the lowest Brier score in a seeded
k-fold over the *fitting* queries is kept ("measure what helps"). Quality is measured by a
seeded k-fold over queries, each fold predicted by a model fit (and chosen) without it:
predicted vs actual useful per probability bucket, expected calibration error (ECE, 10 equal-width
buckets) and predicted / actual total.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ragcost.cost.calibration import FEATURES, MIN_JUDGED, Model, features_of
from ragcost.errors import ConfigError

CANDIDATES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("isotonic", ("score",)),
    ("logistic", ("score",)),
    ("logistic", ("score", "gap", "log_rank")),
)
FOLDS = 5
SEED = 0
BUCKETS = 10


@dataclass
class Judged:
    """One query's final documents: feature rows and qrels verdicts (1 relevant, 0 not)."""

    qid: str
    X: np.ndarray
    y: np.ndarray


def judged_queries(qids: Sequence[str], ranked: Mapping[str, Sequence[str]], scores: Mapping[str, Mapping[str, float]],
                   qrels: Mapping[str, Mapping[str, float]], k: int) -> list[Judged]:
    """Per query, the features and verdicts of its first ``k`` ranked documents that carry a score."""
    out = []
    for q in qids:
        docs = [d for d in ranked.get(q, [])[:k] if d in scores.get(q, {})]
        rel = qrels.get(q, {})
        out.append(Judged(q, features_of([scores[q][d] for d in docs]),
                          np.array([1.0 if rel.get(d, 0) >= 1 else 0.0 for d in docs])))
    return out


def _stack(qs: Sequence[Judged]) -> tuple[np.ndarray, np.ndarray]:
    if not qs:
        return np.zeros((0, len(FEATURES))), np.zeros(0)
    return np.vstack([q.X for q in qs]), np.concatenate([q.y for q in qs])


def fit_one(X: np.ndarray, y: np.ndarray, kind: str, features: Sequence[str]) -> Model:
    """One candidate fitted by scikit-learn, kept as plain numbers."""
    cols = [FEATURES.index(f) for f in features]
    Z = X[:, cols]
    if kind == "isotonic":
        from sklearn.isotonic import IsotonicRegression

        iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(Z[:, 0], y)
        return Model("isotonic", list(features), x=[float(v) for v in iso.X_thresholds_],
                     y=[float(v) for v in iso.y_thresholds_])
    from sklearn.linear_model import LogisticRegression

    mean, scale = Z.mean(axis=0), Z.std(axis=0)
    scale[scale <= 0] = 1.0
    if len(set(y.tolist())) < 2:  # one class only: the constant the data says
        p = float(np.clip(y.mean() if len(y) else 0.0, 1e-6, 1 - 1e-6))
        return Model("logistic", list(features), coef=[0.0] * len(cols), intercept=float(np.log(p / (1 - p))),
                     mean=mean.tolist(), scale=scale.tolist())
    lr = LogisticRegression(C=1.0, max_iter=1000).fit((Z - mean) / scale, y)
    return Model("logistic", list(features), coef=[float(c) for c in lr.coef_[0]], intercept=float(lr.intercept_[0]),
                 mean=mean.tolist(), scale=scale.tolist())


def _folds(n: int, folds: int, seed: int) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    return [order[i::folds] for i in range(min(folds, n))]


def choose(qs: Sequence[Judged], seed: int = SEED, folds: int = FOLDS) -> tuple[Model, dict[str, float]]:
    """The candidate with the lowest k-fold Brier score over ``qs`` (by query), refit on all of ``qs``."""
    X, y = _stack(qs)
    if len(y) < MIN_JUDGED:
        raise ConfigError(f"the expected-useful judge needs at least {MIN_JUDGED} judged documents to fit; "
                          f"got {len(y)}; evaluate more queries")
    if y.sum() == 0:
        raise ConfigError("no retrieved document is relevant by the qrels, so P(relevant) cannot be fit; "
                          "check that the qrels' document ids match the corpus")
    briers: dict[str, float] = {}
    parts = _folds(len(qs), folds, seed)
    for kind, feats in CANDIDATES:
        err = n = 0.0
        for part in parts:
            held = set(part.tolist())
            Xt, yt = _stack([q for i, q in enumerate(qs) if i not in held])
            Xh, yh = _stack([qs[i] for i in part])
            if not len(yh) or not len(yt):
                continue
            p = fit_one(Xt, yt, kind, feats).predict(Xh)
            err += float(((p - yh) ** 2).sum())
            n += len(yh)
        briers[f"{kind}({', '.join(feats)})"] = err / n if n else float("inf")
    best = min(CANDIDATES, key=lambda c: briers[f"{c[0]}({', '.join(c[1])})"])
    return fit_one(X, y, *best), briers


def quality(p: np.ndarray, y: np.ndarray, buckets: int = BUCKETS) -> dict[str, Any]:
    """Predicted vs actual per equal-width probability bucket, ECE, and the totals."""
    rows = []
    ece = 0.0
    edges = np.linspace(0, 1, buckets + 1)
    which = np.clip(np.digitize(p, edges[1:-1]), 0, buckets - 1)
    for b in range(buckets):
        m = which == b
        if not m.any():
            continue
        rows.append({"lo": float(edges[b]), "hi": float(edges[b + 1]), "documents": int(m.sum()),
                     "predicted": float(p[m].sum()), "actual": float(y[m].sum())})
        ece += abs(float(p[m].sum()) - float(y[m].sum())) / len(p)
    pred, act = float(p.sum()), float(y.sum())
    return {"documents": int(len(p)), "predicted": pred, "actual": act, "ratio": pred / act if act else None,
            "ece": ece, "brier": float(((p - y) ** 2).mean()) if len(p) else None, "buckets": rows}


def held_out_quality(qs: Sequence[Judged], seed: int = SEED, folds: int = FOLDS) -> dict[str, Any]:
    """Each fold of queries predicted by a judge fit (and chosen) on the other folds."""
    preds, ys = [], []
    for part in _folds(len(qs), folds, seed):
        held = set(part.tolist())
        model, _ = choose([q for i, q in enumerate(qs) if i not in held], seed, folds)
        Xh, yh = _stack([qs[i] for i in part])
        preds.append(model.predict(Xh))
        ys.append(yh)
    out = quality(np.concatenate(preds), np.concatenate(ys))
    out.update(folds=folds, seed=seed, queries=len(qs))
    return out


def split_queries(qids: Sequence[str], seed: int = SEED) -> tuple[list[str], list[str]]:
    """A seeded half of the queries to fit on and the other half to test on."""
    order = np.random.default_rng(seed).permutation(len(qids))
    half = len(qids) // 2
    fit = sorted(order[:half].tolist())
    test = sorted(order[half:].tolist())
    return [qids[i] for i in fit], [qids[i] for i in test]


def fit_expected(qs: Sequence[Judged], seed: int = SEED, folds: int = FOLDS) -> dict[str, Any]:
    """The model fit on every query, the candidates' Brier scores, and the k-fold held-out quality (as data)."""
    X, y = _stack(qs)
    if not len(y) or y.sum() == 0:
        return {"error": "no retrieved document is relevant by the qrels: nothing to calibrate on "
                         "(check that the qrels' document ids match the corpus)", "judged": int(len(y)), "relevant": 0}
    if len(y) < MIN_JUDGED:
        return {"error": f"{len(y)} judged documents, fewer than the {MIN_JUDGED} a fit needs; evaluate more queries",
                "judged": int(len(y)), "relevant": int(y.sum())}
    model, briers = choose(qs, seed, folds)
    return {"model": model.to_dict(), "label": model.label(), "candidates": briers, "judged": int(len(y)),
            "relevant": int(y.sum()), "quality": held_out_quality(qs, seed, folds)}


def qrels_hash(qrels: Mapping[str, Mapping[str, float]]) -> str:
    return hashlib.sha256(json.dumps(qrels, sort_keys=True, default=str).encode()).hexdigest()[:16]


def quality_lines(fit: Optional[Mapping[str, Any]]) -> list[str]:
    """The terminal block: what was fit, and how it did on held-out queries."""
    if not fit:
        return ["expected-useful judge: not fit"]
    if "error" in fit:
        return [f"expected-useful judge: not fit: {fit['error']}"]
    q = fit["quality"]
    ratio = "n/a" if q["ratio"] is None else f"{q['ratio']:.3f}"
    out = [f"expected-useful judge: {fit['label']} fit on {fit['judged']} judged documents ({fit['relevant']} relevant); "
           f"held-out ({q['folds']}-fold over {q['queries']} queries, seed {q['seed']}): predicted {q['predicted']:.1f} / "
           f"actual {q['actual']:.0f} useful = {ratio}, ECE {q['ece']:.4f}, Brier {q['brier']:.4f}",
           "  P bucket     docs  predicted  actual"]
    for b in q["buckets"]:
        out.append(f"  {b['lo']:.1f}-{b['hi']:.1f}  {b['documents']:>7}  {b['predicted']:>9.1f}  {b['actual']:>6.0f}")
    out.append("  candidates (k-fold Brier, lower is better): "
               + ", ".join(f"{k} {v:.4f}" for k, v in fit["candidates"].items()))
    return out
