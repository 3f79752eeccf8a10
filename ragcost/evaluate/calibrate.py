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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line for the terminal."""
        if not self.pairs:
            return "no retrieved documents to calibrate on"
        if self.threshold is None:
            best = "no relevant document retrieved" if self.precision is None else f"the best threshold gives {self.precision:.3f}"
            return (f"no score threshold reaches precision {self.target_precision:g} on {self.pairs} retrieved documents "
                    f"({best}); use useful: {{judge: cited}} or lower useful.precision")
        return (f"score >= {self.threshold:g}: precision {self.precision:.3f} (target {self.target_precision:g}), keeps "
                f"{self.recall:.1%} of the relevant retrieved documents ({self.kept} of {self.pairs} documents above it)")


def calibrate(pairs: Iterable[tuple[float, bool]], target: float) -> Calibration:
    """The lowest threshold whose {score >= t} has precision >= ``target`` (ties count together)."""
    items = sorted(((float(s), bool(r)) for s, r in pairs if s is not None and math.isfinite(float(s))), key=lambda p: -p[0])
    total_rel = sum(r for _, r in items)
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
    return Calibration(target, short_decimal(best_t, below), r / k, r / total_rel, k, len(items), total_rel)


def short_decimal(t: float, below: float) -> float:
    """The shortest decimal in ``(below, t]`` (``t`` itself when none is shorter)."""
    for digits in range(1, 16):
        d = float(f"{math.floor(t * 10**digits) / 10**digits:.{digits}f}")
        if below < d <= t:
            return d
    return t
