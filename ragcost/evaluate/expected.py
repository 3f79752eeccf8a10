"""Fit the expected-useful judge on qrels, and measure it on queries the fit did not see.

Input per query: its final documents' features (``ragcost.cost.calibration.features_of``) and
whether the qrels call each relevant (graded score >= 1). Candidate models: isotonic regression
on the score (scikit-learn's), logistic regression on the score, and logistic regression on
score + gap to the top + log rank (scikit-learn's objective, solved here: :func:`logistic_l2`).
The one with the lowest Brier score in a seeded k-fold over the *fitting* queries is kept
("measure what helps"). Quality is measured by a
seeded k-fold over queries, each fold predicted by a model fit (and chosen) without it:
predicted vs actual useful per probability bucket, expected calibration error (ECE, 10 equal-width
buckets) and predicted / actual total.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import OrderedDict
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
    mean, scale = Z.mean(axis=0), Z.std(axis=0)
    scale[scale <= 0] = 1.0
    if len(set(y.tolist())) < 2:  # one class only: the constant the data says
        p = float(np.clip(y.mean() if len(y) else 0.0, 1e-6, 1 - 1e-6))
        return Model("logistic", list(features), coef=[0.0] * len(cols), intercept=float(np.log(p / (1 - p))),
                     mean=mean.tolist(), scale=scale.tolist())
    coef, intercept = logistic_l2((Z - mean) / scale, y)
    return Model("logistic", list(features), coef=[float(c) for c in coef], intercept=intercept,
                 mean=mean.tolist(), scale=scale.tolist())


def logistic_l2(Z: np.ndarray, y: np.ndarray, C: float = 1.0, max_iter: int = 100) -> tuple[np.ndarray, float]:
    """(coef, intercept) minimising sum(log-loss) + ||coef||^2 / (2C), the intercept not penalised: the objective of
    scikit-learn's ``LogisticRegression(C=C)``, solved by Newton's method with a backtracking line search.

    The fits here have one to three features and up to a few thousand rows, and eval fits 96 of them per
    configuration (the candidates' k-fold inside a k-fold); Newton reaches the optimum in 4-8 steps where lbfgs,
    at scikit-learn's default tolerance, stops up to 0.01 away from it in a coefficient, in about 3x the time.
    tests/evaluate/test_expected.py checks the optimum against scikit-learn's solved to 1e-12."""
    n, d = Z.shape
    A = np.hstack([Z, np.ones((n, 1))])
    reg = np.full(d + 1, 1.0 / C)
    reg[-1] = 0.0

    def objective(w: np.ndarray) -> float:
        z = A @ w
        return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * np.sum(reg * w * w))

    w = np.zeros(d + 1)
    f = objective(w)
    for _ in range(max_iter):
        p = np.exp(-np.logaddexp(0.0, -(A @ w)))  # the logistic function, without overflow
        g = A.T @ (p - y) + reg * w
        if float(np.max(np.abs(g))) <= 1e-10 * max(1, n):
            break
        H = (A * (p * (1.0 - p))[:, None]).T @ A + np.diag(reg)
        try:
            step = np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(H, g, rcond=None)[0]
        t, decrease = 1.0, float(g @ step)
        while True:
            cand = w - t * step
            fc = objective(cand)
            if fc <= f - 1e-4 * t * decrease or t < 1e-12:
                break
            t *= 0.5
        if fc > f:  # no step lowers it: at the optimum to rounding
            break
        w, f = cand, fc
    return w[:-1], float(w[-1])


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


_FITS: "OrderedDict[str, dict[str, Any]]" = OrderedDict()  # fit_expected's answers by their input (a few, most recent)
_FITS_KEPT = 32


def _fit_key(qs: Sequence[Judged], seed: int, folds: int) -> str:
    h = hashlib.sha256(f"{seed}:{folds}:{len(qs)}".encode())
    for q in qs:
        X, y = np.ascontiguousarray(q.X, np.float64), np.ascontiguousarray(q.y, np.float64)
        h.update(f"|{X.shape[0]}x{X.shape[1] if X.ndim == 2 else 0}".encode())
        h.update(X.tobytes())
        h.update(y.tobytes())
    return h.hexdigest()


def fit_expected(qs: Sequence[Judged], seed: int = SEED, folds: int = FOLDS) -> dict[str, Any]:
    """The model fit on every query, the candidates' Brier scores, and the k-fold held-out quality (as data).

    The answer depends on the queries' features and verdicts alone, so configurations that rank and score
    every query alike (a flat index and an HNSW one at recall 1, one index under two re-rank depths that keep
    the same top k) share one fit: the last few answers are kept by their input's hash, and a copy is returned
    (the caller adds its own fields)."""
    key = _fit_key(qs, seed, folds)
    if key in _FITS:
        _FITS.move_to_end(key)
        return copy.deepcopy(_FITS[key])
    out = _fit_expected(qs, seed, folds)
    _FITS[key] = copy.deepcopy(out)
    while len(_FITS) > _FITS_KEPT:
        _FITS.popitem(last=False)
    return out


def _fit_expected(qs: Sequence[Judged], seed: int, folds: int) -> dict[str, Any]:
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
