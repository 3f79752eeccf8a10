"""Intervals on every eval figure, and the decisions made on them (the pick, tune's floor, compare).

Quality metrics: percentile bootstrap over the run's judged queries (``bootstrap.Resampler``, one
seeded weight matrix shared by every configuration, so any two are compared paired). $ per useful
document and $ per 1k queries: the same bootstrap over queries (a ratio of sums), widened by the
spread of the repeated timing rounds (``ConfigResult.timing_noise``: the search's CPU seconds
vary from round to round on a shared machine).

Decisions (``pick``): a configuration is *within* the floor when the upper end of the interval of
its quality relative to the best configuration (paired, per resample) reaches the floor. Among
those, a configuration is *significantly cheaper* than another only when the interval of their
relative $ per useful document lies below ``-NOISE_FLOOR`` (plus both timing spreads); the pick is
the best quality among the configurations not significantly dearer than the cheapest one. So a
saving the measurement cannot tell from noise never beats quality, and two reruns that swap the
order of two near-equal costs pick the same configuration.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Optional, Sequence

import numpy as np

from ragcost.evaluate.bootstrap import MIN_QUERIES, RESAMPLES, SEED, Interval, Paired, Resampler

# Between two runs on a loaded machine a search's CPU-seconds move by a few percent, and the
# query-embedding seconds come from the cache, so a $ difference under this is never "cheaper".
NOISE_FLOOR = 0.02


@lru_cache(maxsize=4)
def _resampler(n: int, resamples: int, seed: int) -> Resampler:
    return Resampler(n, resamples, seed)


def resampler(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> Optional[Resampler]:
    """The shared resampler over ``n`` queries; None with fewer than MIN_QUERIES (no interval is meaningful)."""
    return _resampler(n, resamples, seed) if n >= MIN_QUERIES else None


def too_few(n: int) -> str:
    return (f"{n} judged queries: fewer than {MIN_QUERIES}, so no confidence intervals and no significance tests "
            "(point estimates only); evaluate on more judged queries (drop --max-queries)")


SEARCH_ROW = "retrieve"  # eval's stage row of the index search (its $ is what timing noise moves)


def is_search(row: dict) -> bool:
    """The stage row of the index search: marked ``search`` (a renamed retrieve stage too); a row stored before
    the mark is found by eval's own name for it."""
    return bool(row.get("search")) if "search" in row else row.get("stage") == SEARCH_ROW


def _search_usd(r: Any) -> float:
    return sum(s["usd"] for s in r.stages if is_search(s))


def noise_rel(r: Any) -> float:
    """The timing rounds' spread as a share of the configuration's whole $."""
    return r.timing_noise * _search_usd(r) / r.total_usd if r.total_usd > 0 else 0.0


def attach(run: Any) -> None:
    """Fill ``ci`` of every measured configuration: each metric, $ per useful document, $ per 1k queries."""
    n = len(run.query_ids)
    rs = resampler(n)
    ok = [r for r in run.results if r.status == "ok" and r.per_query]
    if rs is None:
        run.intervals = {"queries": n, "resamples": 0, "note": too_few(n)}
        if ok:
            run.warnings.append(too_few(n))
        return
    run.intervals = {"method": "percentile bootstrap over queries; paired tests: sign-flip permutation",
                     "queries": n, "resamples": rs.resamples, "seed": rs.seed, "level": rs.level,
                     "noise_floor": NOISE_FLOOR, "timing_rounds": "median of repeated rounds; $ intervals widened by their spread"}
    if not ok:
        return
    for m in run.metric_names:
        rows = [r for r in ok if m in r.per_query]
        if rows:
            for r, iv in zip(rows, rs.intervals(np.stack([r.per_query[m] for r in rows]))):
                r.ci[m] = iv.to_list()
    for r in ok:
        _cost_ci(r, rs)


def attach_one(r: Any, metric_names: Sequence[str], rs: Optional[Resampler]) -> None:
    """``ci`` of one configuration (tune measures one at a time)."""
    if rs is None or r.status != "ok" or not r.per_query:
        return
    for m in metric_names:
        if m in r.per_query:
            r.ci[m] = rs.interval(r.per_query[m]).to_list()
    _cost_ci(r, rs)


def _cost_ci(r: Any, rs: Resampler) -> None:
    usd, useful = r.per_query["usd"], r.per_query["useful"]
    wide = r.timing_noise * _search_usd(r)
    iv = rs.ratio_interval(usd, useful)
    if iv is not None:
        r.ci["usd_per_useful"] = [max(0.0, iv.lo - wide / max(useful.sum(), 1)), iv.hi + wide / max(useful.sum(), 1)]
    k = rs.interval(usd * 1000)
    r.ci["usd_per_1k_queries"] = [max(0.0, k.lo - wide / rs.n * 1000), k.hi + wide / rs.n * 1000]


# ---- decisions --------------------------------------------------------------------------------

def relative_quality(r: Any, best: Any, quality: str, rs: Optional[Resampler]) -> Optional[Interval]:
    """r's quality / the best's, paired over the same resamples; None without per-query values or intervals."""
    if rs is None or quality not in r.per_query or quality not in best.per_query:
        return None
    a, b = rs.means(np.stack([best.per_query[quality], r.per_query[quality]]))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(a > 0, b / np.where(a > 0, a, 1.0), np.nan)
    lo, hi = np.nanpercentile(ratio, [(1 - rs.level) / 2 * 100, (1 + rs.level) / 2 * 100])
    qb = best.metrics.get(quality, 0.0)
    est = r.metrics.get(quality, 0.0) / qb if qb > 0 else math.nan
    return Interval(float(est), float(lo), float(hi), rs.level)


def within(r: Any, best: Any, quality: str, floor: float, rs: Optional[Resampler]) -> bool:
    """Whether r reaches ``floor`` x the best quality: by its interval when there is one, else by its point."""
    rel = relative_quality(r, best, quality, rs)
    if rel is None:
        return r.metrics.get(quality, math.nan) >= floor * best.metrics.get(quality, math.nan) - 1e-12
    return rel.hi >= floor - 1e-12


def cost_change(a: Any, b: Any, rs: Optional[Resampler]) -> Optional[Interval]:
    """$ per useful document of b relative to a (b / a - 1), paired over queries; None without intervals."""
    if rs is None or "usd" not in a.per_query or "usd" not in b.per_query:
        return None
    return rs.paired_ratio(a.per_query["usd"], a.per_query["useful"], b.per_query["usd"], b.per_query["useful"])


def margin(a: Any, b: Any) -> float:
    """How far below 0 a relative $ difference must lie to be called cheaper."""
    return NOISE_FLOOR + noise_rel(a) + noise_rel(b)


def dearer(r: Any, than: Any, rs: Optional[Resampler]) -> bool:
    """r's $ per useful document is significantly above ``than``'s (beyond the noise floor)."""
    if r is than:
        return False
    ch = cost_change(than, r, rs)
    if ch is None:
        return (r.usd_per_useful or math.inf) > (than.usd_per_useful or math.inf)
    return ch.lo > margin(r, than)


def _cost_key(r: Any) -> tuple:
    return (r.usd_per_useful if r.usd_per_useful is not None else math.inf, r.p95_ms, r.bytes_per_vector)


def pick(results: Sequence[Any], quality: str, floor: float, rs: Optional[Resampler]) -> Optional[Any]:
    """The recommended configuration: within the floor of the best; cheaper only where the saving is real."""
    scored = [r for r in results if not math.isnan(r.metrics.get(quality, math.nan))]
    priced = [r for r in scored if r.usd_per_useful is not None]
    if not priced:
        return None
    best = max(scored, key=lambda r: (r.metrics[quality], -r.bytes_per_vector))
    eligible = [r for r in priced if within(r, best, quality, floor, rs)] or priced
    cheapest = min(eligible, key=_cost_key)
    if rs is None:  # point estimates only: the cheapest
        return cheapest
    tied = [r for r in eligible if not dearer(r, cheapest, rs)]
    return max(tied, key=lambda r: (r.metrics[quality], -r.bytes_per_vector, -r.p95_ms, r.name))


def paired_quality(a: Any, b: Any, quality: str, rs: Optional[Resampler]) -> Optional[Paired]:
    if rs is None or quality not in a.per_query or quality not in b.per_query:
        return None
    return rs.paired(a.per_query[quality], b.per_query[quality])


def cost_words(ch: Optional[Interval], m: float) -> str:
    if ch is None:
        return "n/a"
    if ch.hi < -m:
        return "cheaper"
    if ch.lo > m:
        return "dearer"
    return "no significant difference"


def versus_line(r: Any, ref: Any, quality: str, rs: Optional[Resampler]) -> str:
    """``r`` against ``ref``: the paired quality difference with its interval and p, and the $ change."""
    pq = paired_quality(ref, r, quality, rs)
    if pq is None:
        return "no interval (too few judged queries)"
    ch = cost_change(ref, r, rs)
    cost = "" if ch is None else (f"; $/useful {ch.estimate:+.1%} [{ch.lo:+.1%}, {ch.hi:+.1%}]: "
                                  f"{cost_words(ch, margin(r, ref))}")
    return (f"Δ{quality} {pq.diff.fmt('.4f', sign=True)}, p={pq.p:.3g}: {pq.word()}{cost}")


# ---- recorded runs (eval --compare) -----------------------------------------------------------

def _row_noise(row: dict) -> float:
    import json

    stages = json.loads(row["stages"]) if row.get("stages") else []
    search = sum(s["usd"] for s in stages if is_search(s))
    total = row.get("total_usd") or 0.0
    return (row.get("timing_noise") or 0.0) * search / total if total > 0 else 0.0


def compare_rows(ra: dict, rb: dict) -> Optional[dict]:
    """B against A from two ledger rows' per-query values, paired on the queries both judged; None when
    either row has none (recorded before intervals, or too few queries)."""
    import json

    if not ra.get("per_query") or not rb.get("per_query"):
        return None
    a, b = json.loads(ra["per_query"]), json.loads(rb["per_query"])
    pos_a = {q: i for i, q in enumerate(a["ids"])}
    common = [q for q in b["ids"] if q in pos_a]
    rs = resampler(len(common))
    if rs is None:
        return None
    ia = np.array([pos_a[q] for q in common])
    pos_b = {q: i for i, q in enumerate(b["ids"])}
    ib = np.array([pos_b[q] for q in common])
    pick_ = lambda d, k, i: np.asarray(d[k], float)[i]  # noqa: E731
    quality = rs.paired(pick_(a, "quality", ia), pick_(b, "quality", ib))
    cost = rs.paired_ratio(pick_(a, "usd", ia), pick_(a, "useful", ia), pick_(b, "usd", ib), pick_(b, "useful", ib))
    m = NOISE_FLOOR + _row_noise(ra) + _row_noise(rb)
    return {"queries": len(common), "quality": quality, "cost": cost, "margin": m, "cost_word": cost_words(cost, m)}
