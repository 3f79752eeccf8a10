"""The three-way Pareto front (quality up, $ per useful document down, p95 latency down) and the recommendation."""

from __future__ import annotations

import math
from typing import Any, Sequence


def _objectives(r: Any, quality: str) -> tuple[float, float, float]:
    """As costs to minimise; no useful document at all is an infinite cost per useful document."""
    per_useful = r.usd_per_useful if r.usd_per_useful is not None else math.inf
    q = r.metrics.get(quality, math.nan)
    return (-q if not math.isnan(q) else math.inf, per_useful, r.p95_ms)


def dominates(a: tuple, b: tuple) -> bool:
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def pareto_front(results: Sequence[Any], quality: str) -> list[int]:
    """Positions of the results no other result dominates on (quality, $ per useful, p95)."""
    objs = [_objectives(r, quality) for r in results]
    return [i for i, a in enumerate(objs) if not any(dominates(b, a) for j, b in enumerate(objs) if j != i)]


def recommend(results: Sequence[Any], quality: str, within_pct: float) -> int | None:
    """The cheapest result (by $ per useful document, then p95) within ``within_pct`` % of the best quality.

    With per-query values over enough queries (``evaluate.intervals.pick``): within means the interval
    of its quality relative to the best reaches the margin, and cheaper means significantly cheaper.
    """
    from ragcost.evaluate.intervals import pick, resampler

    scored = [(i, r) for i, r in enumerate(results) if not math.isnan(r.metrics.get(quality, math.nan))]
    if not scored:
        return None
    sizes = {len(r.per_query.get(quality, ())) for _, r in scored}
    if len(sizes) == 1 and 0 not in sizes:  # every result scored on the same queries
        chosen = pick([r for _, r in scored], quality, 1 - within_pct / 100.0, resampler(sizes.pop()))
        return next((i for i, r in scored if r is chosen), None)
    best = max(r.metrics[quality] for _, r in scored)
    floor = best * (1 - within_pct / 100.0)
    ok = [(i, r) for i, r in scored if r.metrics[quality] >= floor - 1e-12]
    return min(ok, key=lambda ir: (_objectives(ir[1], quality)[1], ir[1].p95_ms, -ir[1].metrics[quality]))[0]


def mark(results: list[Any], quality: str, within_pct: float) -> None:
    """Set ``pareto`` and ``recommended`` on the measured (status ok) results."""
    ok = [r for r in results if r.status == "ok"]
    for r in results:
        r.pareto = r.recommended = False
    for i in pareto_front(ok, quality):
        ok[i].pareto = True
    best = recommend(ok, quality, within_pct)
    if best is not None:
        ok[best].recommended = True
