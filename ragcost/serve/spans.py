"""One OpenTelemetry server span per HTTP request, parent of the pipeline's spans for its query.

On when the pipeline says ``tracing: {enabled: true}`` (OpenTelemetry is imported only then, and a
missing SDK is one line naming the install). Every request gets a span, whatever its status (a
401, a 429 refused before its body was read, a 499, a stream cut at its deadline): named
``METHOD ROUTE`` with HTTP's semantic-convention attributes (``http.request.method``,
``http.route``, ``http.response.status_code``, ``error.type`` from 400 on; status ERROR for a 5xx
or a stream that ended in an error, as the conventions have it for a server span), the tenant and
outcome (the metrics' labels), and for a request that ran a query the GenAI ones:
``gen_ai.operation.name``, ``gen_ai.request.model`` (the pipeline served), the usage's
``gen_ai.usage.input_tokens`` / ``output_tokens`` and the proposed ``gen_ai.usage.cost.*``
beside ``ragcost.cost.usd``: the query's total, equal to its ledger row. The query's own
``rag.query`` span and its stage spans (:class:`ragcost.cost.tracing.QueryTracer`, tail-sampled by
``tracing.sample_fraction``) are its children. A ``traceparent`` header continues the caller's
trace. Spans are built when the request ends, from the times it recorded, so a request pays
nothing for them while it waits; nothing is shared between worker processes (each has its own
tracer provider), so N workers or N replicas each emit their own requests' spans.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Optional

from ragcost.cost.tracing import COST_ATTRIBUTE, QueryTracer, cost_attributes, query_latency

OPERATIONS = {"/v1/chat/completions": "chat", "/v1/query": "rag.query"}
ERROR_OUTCOMES = {"failed", "deadline", "error"}  # a 200 stream can still end in one of these


class RequestSpans:
    def __init__(self, model: str, fraction: float, tracer_provider: Any = None,
                 models: Optional[Mapping[str, str]] = None) -> None:
        self.queries = QueryTracer(fraction=fraction, tracer_provider=tracer_provider)
        self.tracer = self.queries.tracer
        self.model = model
        self.models = dict(models or {})

    def emit(self, call: Any, status: int, headers: Optional[Mapping[str, str]] = None) -> None:
        """The span of one ended request (``call``: its route, tenant, outcome, start, answer and ticket)."""
        from opentelemetry import propagate
        from opentelemetry.trace import SpanKind, Status, StatusCode

        method = getattr(call, "method", None) or "POST"
        attrs: dict[str, Any] = {"http.request.method": method, "http.route": call.route,
                                 "http.response.status_code": int(status), "ragcost.outcome": call.outcome or "ok"}
        if call.tenant is not None:
            attrs["ragcost.tenant"] = call.tenant
        if status >= 400:
            attrs["error.type"] = str(status)
        op = OPERATIONS.get(call.route)
        if op is not None:
            attrs["gen_ai.operation.name"] = op
            attrs["gen_ai.request.model"] = self.model
        a = getattr(call, "answer", None)
        if a is not None:
            attrs.update(answer_attributes(a))
        parent = propagate.extract(dict(headers)) if headers else None
        end = time.time_ns()
        start = end - int((time.monotonic() - call.t0) * 1e9)
        span = self.tracer.start_span(f"{method} {call.route}", context=parent, kind=SpanKind.SERVER, start_time=start,
                                      attributes=attrs)
        if status >= 500 or (call.outcome in ERROR_OUTCOMES):
            span.set_status(Status(StatusCode.ERROR, f"{status} {call.outcome}"))
        if a is not None and a.records:
            from opentelemetry import trace

            t = getattr(call, "ticket", None)
            started = getattr(t, "started_ns", None) or start
            self.queries.record_query(a.id, a.records, [float(r["cost_usd"]) for r in a.rows[:len(a.records)]],
                                      query_latency(a.rows), is_error=not a.ok, start_ns=started, error=a.error,
                                      storage_usd=sum(float(r["cost_usd"]) for r in a.rows[len(a.records):]),
                                      models=self.models, context=trace.set_span_in_context(span))
        span.end(end_time=end)


def answer_attributes(a: Any) -> dict[str, Any]:
    """The GenAI usage and cost of one answered query: tokens of its generate rows, $ of all its rows (its ledger row's)."""
    out: dict[str, Any] = {"ragcost.query_id": a.id, COST_ATTRIBUTE: a.cost, **cost_attributes(a.cost)}
    tokens_in, tokens_out = usage_tokens(a.rows)
    if tokens_in is not None:
        out["gen_ai.usage.input_tokens"] = tokens_in
    if tokens_out is not None:
        out["gen_ai.usage.output_tokens"] = tokens_out
    return out


def usage_tokens(rows: list[dict]) -> tuple[Optional[int], Optional[int]]:
    """Input (cached included, as the conventions count them) and output tokens of the generate rows; None where
    no generator reported any (an extractive answer has none)."""
    gen = [r for r in rows if r["stage"].startswith("generate")]
    ins = [(r["input_tokens"] or 0) + (r.get("cached_input_tokens") or 0) for r in gen
           if r["input_tokens"] is not None or r.get("cached_input_tokens") is not None]
    outs = [r["output_tokens"] for r in gen if r["output_tokens"] is not None]
    return (sum(ins) if ins else None), (sum(outs) if outs else None)


def request_spans(svc: Any, ledger_url: Optional[str] = None, tracer_provider: Any = None) -> Optional[RequestSpans]:
    """The server's spans when its pipeline has tracing on, else None (OpenTelemetry never imported)."""
    pipe = svc.session.pipe
    if not pipe.config.tracing.enabled:
        return None
    from ragcost.cost.tracing import recent_latencies
    from ragcost.runtime.api import _stage_models

    spans = RequestSpans(svc.name, pipe.config.tracing.sample_fraction, tracer_provider, _stage_models(pipe))
    # The tail sampler's p95 starts from the ledger's recent queries, as `ragcost query`'s does.
    spans.queries.p95.seed(recent_latencies(ledger_url or pipe.config.store_url, pipe.config.name,
                                            spans.queries.p95.samples.maxlen or 0))
    return spans
