"""The one per-stage aggregation: calls, items, tokens, dollars and latency samples per stage.

It reads two shapes of input that hold the same fields:

- **calls** (:func:`by_stage_of_calls`): a priced :class:`UsageRecord` per stage call, as a run
  produces them. Counts are the call's own; each call is one latency sample.
- **ledger rows** (:func:`by_stage_of_rows`): one row per (query, call). Counts are the call's
  totals, so a row adds its query's share (total / items); ``cost_usd`` is already that share.
  Rows of one batch call share a ``call_id`` and give one latency sample between them.

A record or row with ``calls == 0`` is not a call (amortised storage): it adds dollars, not latency.
Each stage keeps the keys of the queries it served (a row's ``query_id``, a call's ``query_ids``),
so its dollars can be set against the useful documents of those same queries (:func:`useful_by_stage`).
Tokens stay None until some call reports them, so "the server did not say" is never a 0.
Percentiles come from :mod:`ragcost.cost.stats`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from ragcost.cost.stats import percentile, percentiles
from ragcost.records import UsageRecord

TOKEN_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens")


@dataclass
class StageAgg:
    """One stage's totals over many calls or ledger rows, in first-seen order."""

    stage: str
    resource: Optional[str] = None
    entries: int = 0  # records or rows added
    calls: float = 0
    items: float = 0
    retries: float = 0
    failures: float = 0
    input_tokens: Optional[float] = None
    cached_input_tokens: Optional[float] = None
    output_tokens: Optional[float] = None
    unknown_cached: int = 0  # entries with input tokens but no cached count (the server did not say)
    usd: float = 0.0
    walls: list[float] = field(default_factory=list)  # wall seconds, one per distinct call
    samples: dict[str, list[float]] = field(default_factory=dict)  # other named latencies (ttft_s ...)
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)  # counters a stage reported, summed
    query_ids: set[str] = field(default_factory=set)  # the queries this stage served
    _call_ids: set[str] = field(default_factory=set, repr=False)

    @property
    def distinct_calls(self) -> int:
        return len(self.walls)

    def latency(self, qs: Sequence[float] = (50, 95, 99)) -> tuple[Optional[float], ...]:
        """Percentiles (seconds) of the calls' wall time."""
        return percentiles(self.walls, qs)

    def sample_percentiles(self, name: str, qs: Sequence[float] = (50, 95)) -> tuple[Optional[float], ...]:
        """Percentiles of a named sample (:attr:`samples`); all None when it has none."""
        return percentiles(self.samples.get(name, ()), qs)

    def sample_percentile(self, name: str, q: float) -> Optional[float]:
        return percentile(self.samples.get(name, ()), q)

    def add(self, e: Mapping[str, Any], share: int = 1) -> None:
        """Add one entry with ledger-row keys; counts are divided by ``share`` (its query's part)."""
        def part(x: Any) -> Any:
            return x if share == 1 else (x or 0) / share

        self.entries += 1
        if self.resource is None:
            self.resource = e.get("resource")
        if not (e.get("split") and e.get("call_id") in self._call_ids):  # one call split by work: counted once
            self.calls += part(e.get("calls") or 0)
        self.items += part(e.get("items") or 0)
        self.retries += part(e.get("retries") or 0)
        self.failures += part(e.get("failures") or 0)
        for key in TOKEN_FIELDS:
            if e.get(key) is not None:
                setattr(self, key, (getattr(self, key) or 0) + part(e[key]))
        if e.get("cached_input_tokens") is None and e.get("input_tokens") is not None:
            self.unknown_cached += 1
        self.usd += float(e.get("cost_usd") or 0.0)
        if e.get("query_id") is not None:
            self.query_ids.add(str(e["query_id"]))
        self.query_ids.update(str(q) for q in e.get("query_ids") or ())
        if e.get("calls"):
            self._add_wall(e.get("call_id"), float(e.get("wall_seconds") or 0.0))

    def _add_wall(self, call_id: Optional[str], seconds: float) -> None:
        if call_id is not None:
            if call_id in self._call_ids:
                return
            self._call_ids.add(call_id)
        self.walls.append(seconds)

    def add_notes(self, notes: Mapping[str, Any]) -> None:
        """Sum a stage's dict-valued counters."""
        for key, val in notes.items():
            if isinstance(val, dict):
                agg = self.notes.setdefault(key, {})
                for kk, vv in val.items():
                    agg[kk] = agg.get(kk, 0) + vv

    def add_samples(self, values: Mapping[str, Optional[float]]) -> None:
        """Keep named latencies (a generate attempt's ``ttft_s`` ...) as samples; a None one adds none."""
        for key, val in values.items():
            self.samples.setdefault(key, [])
            if val is not None:
                self.samples[key].append(float(val))


def record_entry(record: UsageRecord, cost_usd: float, call_id: Optional[str] = None,
                 query_ids: Iterable[str] = ()) -> dict[str, Any]:
    """A priced record in ledger-row shape (``call_id`` None: a call of its own), with the queries it served."""
    return {"query_ids": tuple(query_ids),
        "stage": record.stage, "resource": record.resource, "wall_seconds": record.wall_seconds,
        "items": record.items, "calls": record.calls, "retries": record.retries, "failures": record.failures,
        "input_tokens": record.input_tokens, "cached_input_tokens": record.cached_input_tokens,
        "output_tokens": record.output_tokens, "cost_usd": cost_usd, "call_id": call_id,
    }


def by_stage_of_calls(calls: Iterable[tuple], sample_keys: Sequence[str] = ()) -> dict[str, StageAgg]:
    """Priced records ``(record, its dollars[, keys of the queries it served])`` summed per stage; each record is one call.

    ``sample_keys`` names record fields (e.g. ``ttft_s``) kept as latency samples of the calls that did not fail.
    """
    out: dict[str, StageAgg] = {}
    for record, usd, *served in calls:
        agg = out.setdefault(record.stage, StageAgg(record.stage))
        # A batch call split by what each query used (the runner's per-query records of one call_id): one call
        split = record.work is not None and (record.shared_by or 0) > 1 and record.call_id is not None
        entry = record_entry(record, usd, call_id=record.call_id if split else None, query_ids=served[0] if served else ())
        agg.add({**entry, "split": split})
        agg.add_notes(record.notes)
        if record.failures == 0:
            agg.add_samples({k: getattr(record, k, None) for k in sample_keys})
    return out


def by_stage_of_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, StageAgg]:
    """Ledger stage rows summed per stage as per-query shares; one latency sample per ``call_id``."""
    out: dict[str, StageAgg] = {}
    for r in rows:
        out.setdefault(r["stage"], StageAgg(r["stage"])).add(r, share=max(int(r["items"] or 1), 1))
    return out


def useful_by_stage(aggs: Mapping[str, StageAgg], useful: Mapping[str, float]) -> dict[str, float]:
    """Per stage, the useful documents of the queries it served (``useful``: query key -> its count, a fraction
    under the expected-useful judge: kept whole, as the totals and the bill keep it, never truncated per query)."""
    return {name: sum((useful.get(q) or 0) for q in agg.query_ids) for name, agg in aggs.items()}
