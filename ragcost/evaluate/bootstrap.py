"""Bootstrap intervals over queries, paired differences and their p-values: one resample matrix per run.

Every configuration of an eval run is scored on the same queries, so one seeded matrix of
resample weights ``W`` (resamples x queries: how often resample b drew query i) serves them all.
A metric's resampled means are one matrix product ``values @ W.T / n`` for every configuration at
once, and the paired difference of two configurations is the difference of their resampled
means over the *same* resamples -- the per-query differences are resampled together, as a
paired bootstrap must. The interval is the percentile interval (``level`` 95% by default).
The p-value of a paired difference comes from a sign-flip permutation test (the null: the two
configurations are exchangeable on every query), also seeded and vectorised.

$ per useful document is a ratio of sums (all dollars / all useful documents), so its resamples
are ``(cost @ W.T) / (useful @ W.T)``, never a mean of per-query ratios.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

RESAMPLES = 2000
SEED = 29
LEVEL = 0.95
MIN_QUERIES = 10  # fewer judged queries than this: an interval over them means nothing


@dataclass(frozen=True)
class Interval:
    """A point estimate and its ``level`` interval."""

    estimate: float
    lo: float
    hi: float
    level: float = LEVEL

    def excludes(self, value: float = 0.0) -> bool:
        return self.lo > value or self.hi < value

    def fmt(self, spec: str = ".4f", sign: bool = False) -> str:
        f = ("+" if sign else "") + spec
        return f"{self.estimate:{f}} [{self.lo:{f}}, {self.hi:{f}}]"

    def to_list(self) -> list[float]:
        return [self.lo, self.hi]


@dataclass(frozen=True)
class Paired:
    """B - A on the same queries: the mean difference with its interval, and a two-sided p-value."""

    diff: Interval
    p: float
    n: int

    @property
    def significant(self) -> bool:
        return self.diff.excludes(0.0)

    def word(self, up: str = "better", down: str = "worse") -> str:
        if not self.significant:
            return "no significant difference"
        return up if self.diff.estimate > 0 else down

    def to_dict(self) -> dict:
        return {"diff": self.diff.estimate, "ci": self.diff.to_list(), "level": self.diff.level, "p": self.p,
                "queries": self.n, "significant": self.significant}


class TooFewQueries(ValueError):
    pass


class Resampler:
    """Seeded resample weights over ``n`` queries, shared by every configuration scored on them."""

    def __init__(self, n: int, resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL) -> None:
        if n < 1:
            raise TooFewQueries("no queries to resample")
        self.n, self.resamples, self.seed, self.level = n, resamples, seed, level
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, n, size=(resamples, n))
        flat = (idx + n * np.arange(resamples)[:, None]).ravel()
        # counts, not indices: a metric's resampled means are then one matrix product for all configurations
        self.weights = np.bincount(flat, minlength=resamples * n).reshape(resamples, n).astype(np.float64)
        self._signs: Optional[np.ndarray] = None

    @property
    def signs(self) -> np.ndarray:
        """(resamples, n) random +-1, seeded apart from the weights: the sign-flip permutations."""
        if self._signs is None:
            rng = np.random.default_rng(self.seed + 1)
            self._signs = rng.integers(0, 2, size=(self.resamples, self.n), dtype=np.int8) * 2.0 - 1.0
        return self._signs

    def _check(self, values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        if v.shape[-1] != self.n:
            raise ValueError(f"values over {v.shape[-1]} queries; this resampler draws {self.n}")
        return v

    def means(self, values: np.ndarray) -> np.ndarray:
        """Resampled means: ``(..., n)`` per-query values -> ``(..., resamples)``."""
        return self._check(values) @ self.weights.T / self.n

    def _bounds(self, resampled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = (1 - self.level) / 2 * 100
        lo, hi = np.nanpercentile(resampled, [a, 100 - a], axis=-1)
        return lo, hi

    def intervals(self, values: np.ndarray) -> list[Interval]:
        """The mean of each row of ``(C, n)`` with its percentile interval."""
        v = np.atleast_2d(self._check(values))
        lo, hi = self._bounds(self.means(v))
        return [Interval(float(m), float(a), float(b), self.level) for m, a, b in zip(v.mean(axis=1), lo, hi)]

    def interval(self, values: Sequence[float]) -> Interval:
        return self.intervals(np.asarray(values)[None, :])[0]

    def ratios(self, num: np.ndarray, den: np.ndarray) -> np.ndarray:
        """Resampled ratios of sums ``sum(num) / sum(den)`` (``(..., resamples)``); nan where a resample's den is 0."""
        top, bottom = self.means(num), self.means(den)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)

    def ratio_interval(self, num: Sequence[float], den: Sequence[float]) -> Optional[Interval]:
        """sum(num) / sum(den) with its interval; None when den sums to 0 (no useful document at all)."""
        n, d = np.asarray(num, float), np.asarray(den, float)
        if d.sum() <= 0:
            return None
        r = self.ratios(n[None, :], d[None, :])[0]
        lo, hi = self._bounds(r)
        return Interval(float(n.sum() / d.sum()), float(lo), float(hi), self.level)

    def paired(self, a: Sequence[float], b: Sequence[float]) -> Paired:
        """B - A over the same queries: bootstrap interval of the mean difference, sign-flip p-value."""
        d = self._check(np.asarray(b, float) - np.asarray(a, float))
        lo, hi = self._bounds(self.means(d[None, :])[0])
        obs = abs(d.mean())
        null = np.abs(self.signs @ d) / self.n
        p = float((1 + np.count_nonzero(null >= obs - 1e-12)) / (self.resamples + 1))
        return Paired(Interval(float(d.mean()), float(lo), float(hi), self.level), min(p, 1.0), self.n)

    def paired_ratio(self, num_a, den_a, num_b, den_b) -> Optional[Interval]:
        """Relative difference of two ratios of sums, B / A - 1, over the same resamples; None if either has den 0."""
        na, da, nb, db = (np.asarray(x, float) for x in (num_a, den_a, num_b, den_b))
        if da.sum() <= 0 or db.sum() <= 0 or na.sum() <= 0:
            return None
        r = self.ratios(np.stack([na, nb]), np.stack([da, db]))
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = r[1] / r[0] - 1
        lo, hi = self._bounds(rel)
        est = (nb.sum() / db.sum()) / (na.sum() / da.sum()) - 1
        return Interval(float(est), float(lo), float(hi), self.level)
