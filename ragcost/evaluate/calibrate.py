"""Calibrate the query-time useful-document judge from relevance judgments.

Given (final score, relevant?) for the top-k documents of every query of one configuration,
the threshold is the lowest score ``t`` for which the documents scoring ``>= t`` are relevant
with precision at least ``target``: the most recall the precision allows. Recall is the share of
the relevant documents among those pairs (relevant *and* retrieved in the top k) that the
threshold keeps. When no threshold reaches the target, there is no threshold (``None``), and
the best precision any threshold gives is reported instead.

The threshold written out is the shortest decimal in ``(next lower score, t]``: on the
calibration data it keeps exactly the same documents as ``t``, and it reads like a number.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Optional


@dataclass
class Calibration:
    """The fitted threshold (None: the target is out of reach) and what it keeps on the calibration data."""

    target_precision: float
    threshold: Optional[float]
    precision: Optional[float]  # of {score >= threshold}; with no threshold, the best any threshold gives
    recall: Optional[float]  # share of the relevant retrieved documents kept
    kept: int  # documents at or above the threshold
    pairs: int  # (score, relevant) pairs it was fitted on
    relevant: int  # relevant among them
    objective: str = "precision"  # precision (at least target_precision), f1 (the best F1)
    min_recall: Optional[float] = None  # a recall floor: the best precision among thresholds keeping at least this share
    f1: Optional[float] = None  # of the chosen threshold

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def warning(self) -> Optional[str]:
        """Said when the threshold keeps under 10% of the relevant retrieved documents (it measures almost nothing)."""
        if self.recall is None or self.recall >= LOW_RECALL:
            return None
        return (f"the useful threshold {self.threshold:g} keeps only {self.recall:.1%} of the relevant retrieved documents: "
                "a count by it says little about relevance; use useful: {judge: calibrated} (the expected count), "
                "or useful.objective: f1, or useful.min_recall: 0.5")

    def line(self) -> str:
        """One line for the terminal."""
        if not self.pairs:
            return "no retrieved documents to calibrate on"
        if not self.relevant:
            return (f"none of the {self.pairs} retrieved documents is relevant by the qrels: nothing to calibrate on "
                    "(check that the qrels' document ids match the corpus)")
        if self.threshold is not None and self.objective == "f1":
            return (f"score >= {self.threshold:g}: the best F1 {self.f1:.3f} (precision {self.precision:.3f}, recall "
                    f"{self.recall:.1%} of the relevant retrieved documents; {self.kept} of {self.pairs} documents above it)")
        if self.threshold is not None and self.min_recall is not None:
            reached = "reaches" if self.precision >= self.target_precision else "misses"
            return (f"score >= {self.threshold:g}: precision {self.precision:.3f} ({reached} the target "
                    f"{self.target_precision:g}) at recall {self.recall:.1%} >= the floor {self.min_recall:.0%}; "
                    f"F1 {self.f1:.3f} ({self.kept} of {self.pairs} documents above it)")
        if self.threshold is None:
            best = "no relevant document retrieved" if self.precision is None else f"the best threshold gives {self.precision:.3f}"
            return (f"no score threshold reaches precision {self.target_precision:g} on {self.pairs} retrieved documents "
                    f"({best}); use useful: {{judge: cited}} or lower useful.precision")
        return (f"score >= {self.threshold:g}: precision {self.precision:.3f} (target {self.target_precision:g}), recall "
                f"{self.recall:.1%} (it keeps that share of the relevant retrieved documents; {self.kept} of {self.pairs} "
                f"documents above it), F1 {self.f1:.3f}")


LOW_RECALL = 0.10


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def calibrate(pairs: Iterable[tuple[float, bool]], target: float, objective: str = "precision",
              min_recall: Optional[float] = None) -> Calibration:
    """The threshold for ``objective``: ``precision``, the lowest threshold whose {score >= t} has precision
    >= ``target`` (ties count together); with ``min_recall``, the best precision among thresholds keeping at
    least that share of the relevant documents; ``f1``, the threshold of the best F1."""
    items = sorted(((float(s), bool(r)) for s, r in pairs if s is not None and math.isfinite(float(s))), key=lambda p: -p[0])
    total_rel = sum(r for _, r in items)
    if objective == "f1" or min_recall is not None:
        return _by_curve(items, total_rel, target, objective, min_recall)
    best_t: Optional[float] = None
    best_at = (0, 0)  # (kept, relevant kept) at best_t
    best_prec: Optional[float] = None
    kept = rel = 0
    i = 0
    while i < len(items):
        score = items[i][0]
        while i < len(items) and items[i][0] == score:  # a tie enters the set as one
            rel += items[i][1]
            kept += 1
            i += 1
        prec = rel / kept
        best_prec = prec if best_prec is None else max(best_prec, prec)
        if prec >= target and rel:
            best_t, best_at = score, (kept, rel)
    if best_t is None:
        return Calibration(target, None, best_prec if total_rel else None, None, 0, len(items), total_rel)
    # Below the lowest score nothing else is retrieved; stay within a thousandth of it all the same.
    below = next((s for s, _ in items if s < best_t), best_t - 1e-3)
    k, r = best_at
    return Calibration(target, short_decimal(best_t, below), r / k, r / total_rel, k, len(items), total_rel,
                       f1=_f1(r / k, r / total_rel))


def _by_curve(items: list[tuple[float, bool]], total_rel: int, target: float, objective: str,
              min_recall: Optional[float]) -> Calibration:
    """Walk the thresholds (ties together) and keep the best by F1, or by precision above the recall floor."""
    best: Optional[tuple[float, float, int, int]] = None  # (key, score, kept, relevant kept)
    kept = rel = 0
    i = 0
    while i < len(items) and total_rel:
        score = items[i][0]
        while i < len(items) and items[i][0] == score:
            rel += items[i][1]
            kept += 1
            i += 1
        prec, rec = rel / kept, rel / total_rel
        if objective == "f1":
            key = _f1(prec, rec)
        elif rec >= (min_recall or 0):
            key = prec
        else:
            continue
        if rel and (best is None or key > best[0]):
            best = (key, score, kept, rel)
    if best is None:
        return Calibration(target, None, None, None, 0, len(items), total_rel, objective, min_recall)
    _, t, k, r = best
    below = next((s for s, _ in items if s < t), t - 1e-3)
    return Calibration(target, short_decimal(t, below), r / k, r / total_rel, k, len(items), total_rel, objective,
                       min_recall, _f1(r / k, r / total_rel))


def short_decimal(t: float, below: float) -> float:
    """The shortest decimal in ``(below, t]`` (``t`` itself when none is shorter)."""
    for digits in range(1, 16):
        d = float(f"{math.floor(t * 10**digits) / 10**digits:.{digits}f}")
        if below < d <= t:
            return d
    return t
