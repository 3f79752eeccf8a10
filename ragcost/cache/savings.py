"""What the answer cache saved and what it cost, from the ledger's rows (``ragcost report``).

Per query that met a cache stage, the ledger's ``cache`` column says the tier (exact, semantic,
miss) and whether a fresh retrieval checked the candidate (:meth:`QueryState.cache_record`).

- **Hit rates** are over those queries.
- **False hits**: a served semantic hit that was verified is right by construction; one served
  unverified is checked only through the *sampled* checks (``verify_share``), which re-run
  retrieval for hits that would otherwise have been served unverified. Their wrong share, with its
  Wilson interval, estimates the false-hit rate of unverified hits; the served false-hit rate is
  that times the unverified share of hits.
- **Saved**: each hit saves what a miss spends after the cache stage, in the stages a hit skips,
  at the mean per-query dollars of the misses in the same selection (the pipeline's own recent miss
  cost per stage). With no misses in the selection there is no such figure, and saved is unknown.
- **Spent**: the dollars of the cache's own stages (the lookup, its verifications, which run inside
  it, and the cache_write stages), over every query that met the cache.
- **Net** is saved minus spent; negative means the cache costs more than it saves.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Optional

from ragcost.cache.bound import wilson_interval

CONFIDENCE = 0.95


def _parse(value: Any) -> Optional[dict]:
    if not value:
        return None
    if isinstance(value, dict):
        return value
    try:
        out = json.loads(value)
    except (TypeError, ValueError):
        return None
    return out if isinstance(out, dict) else None


def cache_summary(qrows: list[dict], srows: list[dict]) -> Optional[dict[str, Any]]:
    """The cache section of the report; None when no query in the selection met a cache stage."""
    seen = {str(q["query_id"]): c for q in qrows if (c := _parse(q.get("cache"))) and "tier" in c}
    if not seen:
        return None
    rows_of: dict[str, list[dict]] = defaultdict(list)
    for r in srows:
        if str(r["query_id"]) in seen:
            rows_of[str(r["query_id"])].append(r)
    tiers = [c["tier"] for c in seen.values()]
    n = len(seen)
    exact, semantic = tiers.count("exact"), tiers.count("semantic")
    hits = exact + semantic
    sem = [c for c in seen.values() if c["tier"] == "semantic"]
    unverified = sum(1 for c in sem if not c.get("verified"))

    own = {c["stage"] for c in seen.values() if c.get("stage")} | {w for c in seen.values() for w in c.get("write_stages") or []}
    spent = sum(float(r["cost_usd"]) for rs in rows_of.values() for r in rs if r["stage"] in own)

    # The stages a hit skips, at what the misses paid for them, per query.
    hit_stages = {r["stage"] for qid, c in seen.items() if c["tier"] != "miss" for r in rows_of[qid]}
    misses = [qid for qid, c in seen.items() if c["tier"] == "miss"]
    skipped: dict[str, float] = defaultdict(float)
    for qid in misses:
        rs = rows_of[qid]
        at = next((r["seq"] for r in rs if r["stage"] == seen[qid].get("stage")), None)
        for r in rs:
            after = at is None or r["seq"] is None or r["seq"] > at
            if after and r["stage"] not in own and r["stage"] not in hit_stages:
                skipped[r["stage"]] += float(r["cost_usd"])
    miss_cost = {k: v / len(misses) for k, v in skipped.items()} if misses else {}
    per_hit = sum(miss_cost.values()) if misses else None
    saved = None if per_hit is None else per_hit * hits
    net = None if saved is None else saved - spent

    checks = [c for c in seen.values() if c.get("verified") and c.get("sampled")]
    wrong = sum(1 for c in checks if c.get("correct") is False)
    lo, hi = wilson_interval(wrong, len(checks), CONFIDENCE)
    rate = wrong / len(checks) if checks else None
    verified = [c for c in seen.values() if c.get("verified")]
    return {
        "lookups": n, "exact_hits": exact, "semantic_hits": semantic, "misses": n - hits,
        "exact_hit_rate": exact / n, "semantic_hit_rate": semantic / n, "hit_rate": hits / n,
        "semantic_unverified": unverified,
        "verifications": len(verified), "verifications_wrong": sum(1 for c in verified if c.get("correct") is False),
        "false_hit": {
            "sampled_checks": len(checks), "wrong": wrong, "rate_unverified": rate,
            "interval_95": [lo, hi] if checks else None,
            "served_rate": None if rate is None or not hits else rate * unverified / hits,
            "served_interval_95": [lo * unverified / hits, hi * unverified / hits] if checks and hits else None,
        },
        "miss_cost_per_stage": miss_cost, "saved_per_hit_usd": per_hit,
        "saved_usd": saved, "spent_usd": spent, "net_usd": net,
        "own_stages": sorted(own),
        "verdict": _verdict(saved, spent, len(misses)),
    }


def _verdict(saved: Optional[float], spent: float, misses: int) -> str:
    if saved is None:
        return "saved unknown: no misses in this selection to price a miss"
    if saved < spent:
        return "the cache costs more than it saves"
    return "the cache saves more than it costs"
