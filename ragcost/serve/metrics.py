"""Prometheus metrics in a registry of the app's own (so two apps in one process never collide)."""

from __future__ import annotations

from typing import Any


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.stage_seconds = Histogram("ragcost_stage_seconds", "wall seconds of a stage call", ["stage"], registry=r,
                                       buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.stage_calls = Counter("ragcost_stage_calls", "stage calls (a batch call counts once)", ["stage"], registry=r)
        self.stage_tokens = Counter("ragcost_stage_tokens", "tokens stages reported", ["stage", "kind"], registry=r)
        self.usd = Counter("ragcost_cost_usd", "dollars, by stage (storage included)", ["stage"], registry=r)
        self.requests = Counter("ragcost_requests", "requests by route and status", ["route", "status"], registry=r)
        self.queue_depth = Gauge("ragcost_queue_depth", "requests waiting for a batch", registry=r)
        self.batch_size = Histogram("ragcost_batch_size", "requests per batch", registry=r,
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
        self.cache_hits = Counter("ragcost_cache_hits", "queries a cache stage answered", registry=r)
        self._seen_calls: set[str] = set()

    def batch(self, n: int) -> None:
        self.batch_size.observe(n)

    def answer(self, rows: list[dict[str, Any]], outcome: str, cache: bool) -> None:
        """Count one answer: $ per row (its share); latency, calls and tokens once per shared call."""
        for r in rows:
            self.usd.labels(r["stage"]).inc(float(r["cost_usd"]))
            if r["calls"] == 0 or r["call_id"] in self._seen_calls:
                continue
            self._seen_calls.add(r["call_id"])
            self.stage_seconds.labels(r["stage"]).observe(r["wall_seconds"])
            self.stage_calls.labels(r["stage"]).inc(r["calls"])
            for kind in ("input_tokens", "output_tokens"):
                if r.get(kind):
                    self.stage_tokens.labels(r["stage"], kind).inc(r[kind])
        if len(self._seen_calls) > 100_000:  # bounded: a call's rows arrive within one batch
            self._seen_calls.clear()
        if cache:
            self.cache_hits.inc()

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
