"""The false-hit bound: a Wilson upper bound on the wrong-hit rate, and thresholds learned online from verified hits.

Each observation is (entry, similarity, correct): a semantic candidate whose answer basis was
checked against a fresh run (a verified hit re-runs retrieval; a candidate that missed is judged
free of charge against the answer the pipeline then produced). A similarity ``s`` may be served
*without* verification only when, among the observations at similarity ≥ ``s`` in its
neighbourhood, the upper end of the ``confidence`` interval on the wrong rate is within
``max_false_hit_rate``. The neighbourhood is the entry once it has ``min_entry_evidence``
observations of its own, else every entry. An entry that was once wrong at similarity ``x``
never serves unverified at or below ``x``. With too little evidence the answer is: verify, or miss.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from statistics import NormalDist
from typing import Optional


def wilson_interval(errors: int, n: int, confidence: float) -> tuple[float, float]:
    """The two-sided Wilson score interval for errors / n ((0, 1) when n == 0)."""
    if n <= 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = errors / n
    denom = 1 + z * z / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / denom), min(1.0, (centre + spread) / denom)


def wilson_upper(errors: int, n: int, confidence: float) -> float:
    """Upper end of the two-sided Wilson score interval for errors / n (1.0 when n == 0)."""
    return wilson_interval(errors, n, confidence)[1]


class _Pool:
    """Observations of one neighbourhood, sorted by similarity; the lowest safe threshold, cached."""

    def __init__(self) -> None:
        self.sims: list[float] = []
        self.wrong: list[bool] = []
        self._threshold: Optional[float] = None
        self._dirty = True
        self.worst_wrong = -math.inf  # highest similarity at which it was wrong

    def add(self, sim: float, correct: bool) -> None:
        i = bisect_left(self.sims, sim)
        self.sims.insert(i, sim)
        self.wrong.insert(i, not correct)
        if not correct:
            self.worst_wrong = max(self.worst_wrong, sim)
        self._dirty = True

    def threshold(self, alpha: float, confidence: float) -> float:
        """The lowest observed similarity t with upper(wrong | sim ≥ t) ≤ alpha; +inf when none."""
        if self._dirty:
            best, errors = math.inf, 0
            n = len(self.sims)
            for i in range(n - 1, -1, -1):  # walk down from the most similar
                errors += self.wrong[i]
                if i > 0 and self.sims[i - 1] == self.sims[i]:
                    continue  # a threshold takes every observation at its similarity, ties included
                if wilson_upper(errors, n - i, confidence) <= alpha:
                    best = self.sims[i]
            self._threshold, self._dirty = best, False
        return self._threshold


class ThresholdLearner:
    """Decides, per candidate, whether a semantic hit may be served unverified."""

    def __init__(self, max_false_hit_rate: float, confidence: float, min_entry_evidence: int = 20) -> None:
        self.alpha, self.confidence, self.min_entry = max_false_hit_rate, confidence, min_entry_evidence
        self.everyone = _Pool()
        self.per_entry: dict[str, _Pool] = {}

    def add(self, entry_id: str, similarity: float, correct: bool) -> None:
        self.everyone.add(similarity, correct)
        self.per_entry.setdefault(entry_id, _Pool()).add(similarity, correct)

    @property
    def evidence(self) -> int:
        return len(self.everyone.sims)

    def threshold(self, entry_id: str) -> float:
        own = self.per_entry.get(entry_id)
        pool = own if own is not None and len(own.sims) >= self.min_entry else self.everyone
        return pool.threshold(self.alpha, self.confidence)

    def trusted(self, entry_id: str, similarity: float) -> bool:
        """Whether the bound holds at this similarity for this entry (serve without verifying)."""
        own = self.per_entry.get(entry_id)
        if own is not None and similarity <= own.worst_wrong:
            return False
        return similarity >= self.threshold(entry_id)
