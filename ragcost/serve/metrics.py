"""Prometheus metrics in a registry of the app's own (so two apps in one process never collide).

Every sample carries ``replica`` (the server's name, :mod:`ragcost.serve.replica`): one value per
server, so replicas behind one load balancer aggregate with ``sum by (...)`` and split with
``by (replica)`` without relying on the scrape's ``instance`` label.
"""

from __future__ import annotations

from typing import Any, Optional


class Metrics:
    def __init__(self, replica: str = "-") -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.replica = replica
        self.registry = CollectorRegistry()
        r = self.registry
        self.stage_seconds = Histogram("ragcost_stage_seconds", "wall seconds of a stage call", ["stage"], registry=r,
                                       buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.stage_calls = Counter("ragcost_stage_calls", "stage calls (a batch call counts once)", ["stage"], registry=r)
        self.stage_tokens = Counter("ragcost_stage_tokens", "tokens stages reported", ["stage", "kind"], registry=r)
        self.usd = Counter("ragcost_cost_usd", "dollars, by stage (storage included)", ["stage"], registry=r)
        # Every request of every route, by status; labels are bounded: route is a served path or
        # "other", tenant a keys-file tenant, "-" (none) or "other", outcome a fixed set (errors.outcome_of).
        self.requests = Counter("ragcost_requests", "requests by route, status, tenant and outcome",
                                ["route", "status", "tenant", "outcome"], registry=r)
        self.request_seconds = Histogram("ragcost_request_seconds", "seconds from request to response end", ["route"], registry=r,
                                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.tenant_usd = Counter("ragcost_tenant_cost_usd", "dollars by tenant (its share of every call, storage included)",
                                  ["tenant"], registry=r)
        self.in_flight = Gauge("ragcost_in_flight", "requests admitted and not yet answered", registry=r)
        self.service_rate = Gauge("ragcost_service_rate", "measured queries per second the stages finish while busy", registry=r)
        self.predicted_wait = Gauge("ragcost_predicted_wait_seconds", "predicted seconds for a request admitted now to finish", registry=r)
        self.queue_depth = Gauge("ragcost_queue_depth", "requests waiting for a batch", registry=r)
        self.batch_size = Histogram("ragcost_batch_size", "requests per batch", registry=r,
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
        self.cache_hits = Counter("ragcost_cache_hits", "queries a cache stage answered", registry=r)
        self._seen_calls: set[str] = set()
        self._tenants: set[str] = set()

    MAX_TENANTS = 200  # beyond this many distinct tenant labels the rest count as "other"

    def known_tenants(self, names: list[str]) -> None:
        """The tenants of the keys file: the only values the tenant label takes (besides "-" and "other")."""
        self._tenants = set(names[: self.MAX_TENANTS])

    def tenant(self, name: Optional[str]) -> str:
        if name is None:
            return "-"
        return name if name in self._tenants else "other"

    def request(self, route: str, status: int, tenant: Optional[str], outcome: str, seconds: Optional[float] = None) -> None:
        self.requests.labels(route, str(status), self.tenant(tenant), outcome).inc()
        if seconds is not None:
            self.request_seconds.labels(route).observe(seconds)

    def batch(self, n: int) -> None:
        self.batch_size.observe(n)

    def answer(self, rows: list[dict[str, Any]], outcome: str, cache: bool, tenant: Optional[str] = None) -> None:
        """Count one answer: $ per row (its share); latency, calls and tokens once per shared call."""
        spent = sum(float(r["cost_usd"]) for r in rows)
        if spent:
            self.tenant_usd.labels(self.tenant(tenant)).inc(spent)
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

        return generate_latest(_Labelled(self.registry, {"replica": self.replica})), CONTENT_TYPE_LATEST


class _Labelled:
    """A registry's samples with constant labels added (what ``generate_latest`` reads: ``collect()``)."""

    def __init__(self, registry: Any, labels: dict[str, str]) -> None:
        self.registry, self.labels = registry, labels

    def collect(self):
        from prometheus_client.metrics_core import Metric

        for fam in self.registry.collect():
            out = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            out.samples = [s._replace(labels={**s.labels, **self.labels}) for s in fam.samples]
            yield out
