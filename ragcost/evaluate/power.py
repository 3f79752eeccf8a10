"""What the judgments can detect: the smallest quality loss a paired comparison sees, and the questions a floor needs.

A floor (``tune --floor 0.98``, eval's ``within_pct``) asks the judgments to tell a configuration that
loses ``(1 - floor) x best`` from one that loses nothing. Whether they can is a power question,
answered from the same paired bootstrap the decisions use (``bootstrap.Resampler``): the standard
error of the mean per-query difference between two configurations is the spread of its resampled
means, and a two-sided test at level ``ALPHA`` detects a true difference with probability ``POWER``
once the difference reaches ``(z(1 - ALPHA/2) + z(POWER)) x SE`` (about 2.8 standard errors).

The standard error belongs to a pair of configurations: two near-identical ones (float32 and int8 of
one index) disagree on few questions, two distant ones on many. The floor's figure uses the pair
the floor decides between: the best configuration and the measured one whose loss is nearest the
floor's (:func:`floor_power`). Questions needed scale as ``SE^2``: ``n x (detectable / loss)^2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Optional, Sequence

import numpy as np

POWER = 0.80
ALPHA = 0.05


def z_sum(power: float = POWER, alpha: float = ALPHA) -> float:
    """Standard errors between 0 and the smallest difference detected with ``power`` at two-sided ``alpha``."""
    nd = NormalDist()
    return nd.inv_cdf(1 - alpha / 2) + nd.inv_cdf(power)


def standard_error(rs: Any, a: Sequence[float], b: Sequence[float]) -> float:
    """The paired bootstrap's standard error of mean(b - a): the spread of its resampled means."""
    d = np.asarray(b, float) - np.asarray(a, float)
    return float(rs.means(d[None, :])[0].std(ddof=1))


def detectable(rs: Any, a: Sequence[float], b: Sequence[float], power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest mean difference between a and b that ``len(a)`` questions detect (absolute, metric units)."""
    return z_sum(power, alpha) * standard_error(rs, a, b)


def questions_needed(n: int, detectable_now: float, loss: float) -> Optional[int]:
    """Questions for ``loss`` to be detectable, when ``n`` questions detect ``detectable_now`` (SE ~ 1/sqrt(n))."""
    if loss <= 0 or detectable_now <= 0:
        return None
    return max(1, math.ceil(n * (detectable_now / loss) ** 2))


@dataclass(frozen=True)
class FloorPower:
    """What ``queries`` questions can tell about ``floor`` x ``best_quality``, from the pair ``best`` vs ``against``."""

    quality: str
    queries: int
    floor: float
    best_quality: float
    best: str
    against: str
    detectable: float  # absolute, in the quality metric's units
    needed: Optional[int]  # questions for the floor's loss to be detectable; None when the pair never differs
    power: float = POWER
    alpha: float = ALPHA

    @property
    def floor_loss(self) -> float:
        return (1 - self.floor) * self.best_quality

    @property
    def detectable_rel(self) -> float:
        return self.detectable / self.best_quality if self.best_quality > 0 else math.nan

    @property
    def sees_floor(self) -> bool:
        """The floor's loss is at least what the judgments detect."""
        return self.floor_loss >= self.detectable - 1e-12

    def line(self) -> str:
        need = "" if self.needed is None else f"; a {1 - self.floor:.1%} loss (the floor asked) needs about {self.needed:,} questions"
        return (f"power: {self.queries} questions detect a {self.quality} loss of {self.detectable:.4f} "
                f"({self.detectable_rel:.1%} of the best) at {self.power:.0%} power, {self.alpha:.0%} level "
                f"(paired bootstrap, {self.best} vs {self.against}){need}")

    def warning(self) -> Optional[str]:
        if self.sees_floor:
            return None
        return (f"the floor {self.floor:g} asks to tell a {1 - self.floor:.1%} loss ({self.floor_loss:.4f} {self.quality}) from none, "
                f"but {self.queries} questions detect only {self.detectable_rel:.1%} ({self.detectable:.4f}): a configuration "
                f"\"within the floor\" is one the judgments cannot tell from the floor; judge about {self.needed or '?':,} "
                f"questions, or lower the floor to {max(0.0, 1 - self.detectable_rel):.3f}")

    def to_dict(self) -> dict[str, Any]:
        return {"quality": self.quality, "queries": self.queries, "power": self.power, "alpha": self.alpha,
                "floor": self.floor, "floor_loss": self.floor_loss, "detectable": self.detectable,
                "detectable_rel": self.detectable_rel, "questions_needed": self.needed, "sees_floor": self.sees_floor,
                "pair": [self.best, self.against], "line": self.line()}


def floor_power(results: Sequence[Any], best: Any, quality: str, floor: float, rs: Any) -> Optional[FloorPower]:
    """The floor's power from the pair it decides between: the best and the measured configuration whose
    loss is nearest ``(1 - floor) x best`` (one that scores every question as the best does tells nothing);
    None without intervals or without a second configuration."""
    if rs is None or best is None or quality not in best.per_query:
        return None
    qb = best.metrics.get(quality, math.nan)
    want = (1 - floor) * qb
    others = [r for r in results if r is not best and quality in r.per_query
              and np.any(np.asarray(r.per_query[quality]) != np.asarray(best.per_query[quality]))]
    if not others or not qb > 0:
        return None
    near = min(others, key=lambda r: (abs(qb - r.metrics.get(quality, 0.0) - want), r.name))
    det = detectable(rs, best.per_query[quality], near.per_query[quality])
    return FloorPower(quality, rs.n, floor, qb, best.name, near.name, det, questions_needed(rs.n, det, want))


def attach_power(run: Any) -> None:
    """``run.intervals["power"]``: what the run's judgments detect of its ``within_pct`` (eval's floor)."""
    from ragcost.evaluate.intervals import resampler

    ok = [r for r in run.ok() if run.quality in r.per_query]
    rs = resampler(len(run.query_ids))
    if not ok or rs is None or any(len(r.per_query[run.quality]) != rs.n for r in ok):
        return
    best = max(ok, key=lambda r: (r.metrics.get(run.quality, float("-inf")), -r.bytes_per_vector))
    fp = floor_power(ok, best, run.quality, 1 - run.within_pct / 100.0, rs)
    if fp is not None:
        run.intervals["power"] = fp.to_dict()
        if not fp.sees_floor:
            run.warnings.append(fp.warning())
