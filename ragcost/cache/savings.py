"""What the answer cache avoided and what it cost, from the ledger's rows (``ragcost report``, ``ragcost cache stats``).

Per query that met a cache stage, the ledger's ``cache`` column says the tier (exact, semantic,
miss), whether a fresh retrieval checked the candidate, and for a hit the ``origin``: the ledger
query id of the miss whose answer it served (:meth:`QueryState.cache_record`).

- **Hits by tier**: exact, semantic verified (a fresh retrieval confirmed the answer's basis),
  semantic unverified (served on the learned bound alone).
- **Avoided**: a hit avoided what its origin paid in the stages the hit did not run: the origin's
  rows after its cache stage, less the cache's own stages, the stages the hit ran too, and the
  rows every query pays (:data:`ragcost.records.PROCESS_ROWS`: storage, start-up, overhead). An
  origin outside the selection is read from the ledger by id; a hit whose origin is not in the
  ledger (an entry written without one, or with the ledger off) is counted in ``avoided_unknown``,
  never guessed.
- **Own cost**: the dollars of the cache's own stages (the lookup, its verifications, which run
  inside it, and the cache_write stages), over every query that met the cache.
- **False hits**: a served semantic hit that was verified is counted right (a fresh retrieval confirmed its
  answer's basis; that is not proof it is the same question, so the expected cost is a lower bound); one served
  unverified is checked only through the *sampled* checks (``verify_share``), which re-run
  retrieval for hits that would otherwise have been served unverified. Their wrong share, with its
  Wilson interval, estimates the false-hit rate of unverified hits. The expected false hits are
  the unverified hits served times that rate, and their cost that times the price book's
  ``wrong_answer_usd`` (unset: not priced).
- **Net** = avoided − own cost − expected false-hit cost, with the ends of the false-hit interval.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Callable, Iterable, Optional

from ragcost.cache.bound import wilson_interval
from ragcost.records import PROCESS_ROWS

CONFIDENCE = 0.95
TIERS = ("exact", "semantic_verified", "semantic_unverified")
OriginRows = Callable[[list[str]], list[dict]]  # ledger query ids -> their stage rows


def cache_column(value: Any) -> Optional[dict]:
    """A ledger query's ``cache`` column as a dict; None when empty or unreadable."""
    if not value:
        return None
    if isinstance(value, dict):
        return value
    try:
        out = json.loads(value)
    except (TypeError, ValueError):
        return None
    return out if isinstance(out, dict) else None


def tier_of(c: dict) -> str:
    """A hit's tier as the value block counts it (a miss is "miss")."""
    if c["tier"] == "semantic":
        return "semantic_verified" if c.get("verified") else "semantic_unverified"
    return c["tier"]


def skipped_rows(origin: list[dict], cache_stage: Optional[str], own: set[str], ran: set[str]) -> Iterable[dict]:
    """The origin's rows a hit did not pay for: after the origin's cache stage, none of the cache's own stages,
    none the hit ran too, and no row every query pays (storage, the process's CPU outside stage calls)."""
    at = next((r["seq"] for r in origin if r["stage"] == cache_stage), None)
    for r in origin:
        after = at is None or r["seq"] is None or r["seq"] > at
        if after and r["stage"] not in own and r["stage"] not in ran and r["stage"] not in PROCESS_ROWS:
            yield r


def cache_summary(qrows: list[dict], srows: list[dict], origin_rows: Optional[OriginRows] = None,
                  wrong_answer_usd: Optional[float] = None) -> Optional[dict[str, Any]]:
    """The cache's value over the selection; None when no query in it met a cache stage.

    ``origin_rows`` reads the stage rows of origins outside the selection from the ledger (without it they count
    as unknown); ``wrong_answer_usd`` prices a false hit (None: not priced).
    """
    seen = {str(q["query_id"]): c for q in qrows if (c := cache_column(q.get("cache"))) and "tier" in c}
    if not seen:
        return None
    rows_of: dict[str, list[dict]] = defaultdict(list)
    for r in srows:
        rows_of[str(r["query_id"])].append(r)
    hits = {qid: c for qid, c in seen.items() if c["tier"] != "miss"}
    n = len(seen)
    by_tier = {t: sum(1 for c in hits.values() if tier_of(c) == t) for t in TIERS}
    unverified = by_tier["semantic_unverified"]

    own = {c["stage"] for c in seen.values() if c.get("stage")} | {w for c in seen.values() for w in c.get("write_stages") or []}
    own_by_stage: dict[str, float] = defaultdict(float)
    for qid in seen:
        for r in rows_of[qid]:
            if r["stage"] in own:
                own_by_stage[r["stage"]] += float(r["cost_usd"])
    own_cost = sum(own_by_stage.values())

    origins = _origins(hits, rows_of, origin_rows)
    avoided_by_stage: dict[str, float] = defaultdict(float)
    unknown = 0
    for qid, c in hits.items():
        origin = origins.get(str(c.get("origin") or ""))
        if not origin:
            unknown += 1
            continue
        for r in skipped_rows(origin, c.get("stage"), own, {r["stage"] for r in rows_of[qid]}):
            avoided_by_stage[r["stage"]] += float(r["cost_usd"])
    priced = len(hits) - unknown
    avoided = sum(avoided_by_stage.values()) if priced else None

    false_hit = _false_hits(seen.values(), unverified, len(hits), wrong_answer_usd)
    net, net_interval = None, None
    if avoided is not None:
        net = avoided - own_cost - (false_hit["expected_usd"] or 0.0)
        ends = false_hit["expected_usd_interval_95"]
        net_interval = [avoided - own_cost - ends[1], avoided - own_cost - ends[0]] if ends else None
    verified = [c for c in seen.values() if c.get("verified")]
    return {
        "lookups": n, "exact_hits": by_tier["exact"], "semantic_hits": len(hits) - by_tier["exact"], "misses": n - len(hits),
        "exact_hit_rate": by_tier["exact"] / n, "semantic_hit_rate": (len(hits) - by_tier["exact"]) / n, "hit_rate": len(hits) / n,
        "hits_by_tier": by_tier,
        "verifications": len(verified), "verifications_wrong": sum(1 for c in verified if c.get("correct") is False),
        "false_hit": false_hit,
        "avoided_usd": avoided, "avoided_by_stage": dict(avoided_by_stage), "avoided_hits": priced,
        "avoided_per_hit_usd": avoided / priced if priced else None, "avoided_unknown": unknown,
        "own_cost_usd": own_cost, "own_cost_by_stage": dict(own_by_stage), "own_stages": sorted(own),
        "net_usd": net, "net_interval_95": net_interval,
        "verdict": _verdict(net, net_interval, len(hits), unknown),
    }


def _origins(hits: dict[str, dict], rows_of: dict[str, list[dict]], origin_rows: Optional[OriginRows]) -> dict[str, list[dict]]:
    """Each hit's origin's stage rows: from the selection, else (one read) from the ledger."""
    wanted = {str(c["origin"]) for c in hits.values() if c.get("origin")}
    found = {o: rows_of[o] for o in wanted if rows_of.get(o)}
    outside = sorted(wanted - set(found))
    if outside and origin_rows is not None:
        for r in origin_rows(outside):
            found.setdefault(str(r["query_id"]), []).append(r)
    return found


def _false_hits(seen: Iterable[dict], unverified: int, hits: int, price: Optional[float]) -> dict[str, Any]:
    """The sampled estimate of the false-hit rate of unverified hits, the served false hits it implies, and their price."""
    checks = [c for c in seen if c.get("verified") and c.get("sampled")]
    wrong = sum(1 for c in checks if c.get("correct") is False)
    lo, hi = wilson_interval(wrong, len(checks), CONFIDENCE)
    rate = wrong / len(checks) if checks else None
    if not unverified:  # nothing was served unchecked: no false hit to expect, whatever the rate
        expected, ends = 0.0, [0.0, 0.0]
    elif rate is None:
        expected, ends = None, None
    else:
        expected, ends = rate * unverified, [lo * unverified, hi * unverified]
    known = expected is not None and (price is not None or expected == 0)  # none expected costs nothing, priced or not
    price_or_0 = price or 0.0
    return {
        "sampled_checks": len(checks), "wrong": wrong, "rate_unverified": rate,
        "interval_95": [lo, hi] if checks else None,
        "served_rate": None if rate is None or not hits else rate * unverified / hits,
        "served_interval_95": [lo * unverified / hits, hi * unverified / hits] if checks and hits else None,
        "expected": expected, "expected_interval_95": ends, "wrong_answer_usd": price,
        "expected_usd": expected * price_or_0 if known else None,
        "expected_usd_interval_95": [ends[0] * price_or_0, ends[1] * price_or_0] if known else None,
    }


def _verdict(net: Optional[float], interval: Optional[list[float]], hits: int, unknown: int) -> str:
    if not hits:
        return "no hits: the cache avoided nothing"
    if net is None:
        return "avoided unknown: no hit's origin is in the ledger"
    part = f" on the {hits - unknown} hits whose origin the ledger holds" if unknown else ""
    if interval is not None and interval[0] < 0 < interval[1]:
        return f"uncertain{part}: the net's 95% interval spans zero"
    if net < 0:
        return f"the cache costs more than it avoids{part}"
    return f"the cache avoids more than it costs{part}"
