"""Optional OpenTelemetry spans per stage, with GenAI semantic-convention attributes and the stage's cost.

Tail sampling: a query's spans are emitted after it finishes, so the decision can keep every
error and every query slower than the running p95, plus ``fraction`` of the rest. The decision
(:func:`should_keep`) and the attributes (:func:`span_attributes`) are pure and need no OTel.
Stage spans are laid end to end from the query's start: the runner records durations, not offsets.
"""

from __future__ import annotations

import random
import time
from collections import deque
from typing import Any, Optional, Sequence

from ragcost.cost.stats import percentile

from ragcost.records import UsageRecord
from ragcost.errors import DependencyError

INSTALL_HINT = "tracing needs opentelemetry-sdk: pip install 'ragcost[otel]'"
COST_ATTRIBUTE = "ragcost.cost.usd"
# GenAI operation names for the stages that are model calls; other stages keep their own name.
OPERATION_NAMES = {"embed": "embeddings", "generate": "chat"}


def should_keep(latency: float, is_error: bool, p95: Optional[float], fraction: float, rng: random.Random) -> bool:
    """Keep every error, every query slower than the running p95 (all while p95 is unknown), and ``fraction`` of the rest."""
    if is_error or p95 is None or latency > p95:
        return True
    return rng.random() < fraction


class RunningP95:
    """p95 over the last ``window`` latencies; None until ``min_samples`` have been seen."""

    def __init__(self, window: int = 1000, min_samples: int = 20):
        self.samples: deque[float] = deque(maxlen=window)
        self.min_samples = min_samples

    def add(self, latency: float) -> None:
        self.samples.append(float(latency))

    @property
    def value(self) -> Optional[float]:
        if len(self.samples) < self.min_samples:
            return None
        return percentile(self.samples, 95)


def span_attributes(record: UsageRecord, cost_usd: float, model: Optional[str] = None) -> dict[str, Any]:
    """The span attributes of one stage call; token attributes only where the count is known."""
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": OPERATION_NAMES.get(record.stage, record.stage),
        "gen_ai.request.model": model or str(record.notes.get("model", record.resource)),
        "ragcost.stage": record.stage,
        "ragcost.resource": record.resource,
        "ragcost.items": record.items,
        "ragcost.retries": record.retries,
        "ragcost.failures": record.failures,
        COST_ATTRIBUTE: float(cost_usd),
    }
    # Semantic conventions count cached tokens inside input_tokens; ours keeps them apart.
    if record.input_tokens is not None or record.cached_input_tokens is not None:
        attrs["gen_ai.usage.input_tokens"] = (record.input_tokens or 0) + (record.cached_input_tokens or 0)
    if record.cached_input_tokens is not None:
        attrs["gen_ai.usage.cache_read.input_tokens"] = record.cached_input_tokens
    if record.output_tokens is not None:
        attrs["gen_ai.usage.output_tokens"] = record.output_tokens
    return attrs


def _otel_trace():
    try:
        from opentelemetry import trace
    except ImportError:
        raise DependencyError(INSTALL_HINT) from None
    return trace


class QueryTracer:
    """Emits one ``rag.query`` span with a child span per stage call, for the queries sampling keeps."""

    def __init__(self, fraction: float = 0.1, seed: Optional[int] = None, tracer_provider: Any = None,
                 window: int = 1000, min_samples: int = 20):
        trace = _otel_trace()
        self._trace = trace
        self.tracer = trace.get_tracer("ragcost", tracer_provider=tracer_provider)
        self.fraction = fraction
        self.rng = random.Random(seed)
        self.p95 = RunningP95(window, min_samples)

    def record_query(self, query_id: str, records: Sequence[UsageRecord], costs: Sequence[float], latency: float,
                     is_error: bool = False, start_ns: Optional[int] = None, error: Optional[str] = None) -> bool:
        """Decide, then emit the query's spans if kept; the latency joins the running p95 either way."""
        keep = should_keep(latency, is_error, self.p95.value, self.fraction, self.rng)
        self.p95.add(latency)
        if not keep:
            return False
        from opentelemetry.trace import Status, StatusCode

        start = start_ns if start_ns is not None else time.time_ns() - int(latency * 1e9)
        root = self.tracer.start_span("rag.query", start_time=start,
                                      attributes={"ragcost.query_id": query_id, COST_ATTRIBUTE: float(sum(costs))})
        ctx = self._trace.set_span_in_context(root)
        t = start
        for rec, cost in zip(records, costs):
            end = t + int(rec.wall_seconds * 1e9)
            op = OPERATION_NAMES.get(rec.stage, rec.stage)
            span = self.tracer.start_span(f"{op} {rec.stage}", context=ctx, start_time=t,
                                          attributes=span_attributes(rec, cost))
            if rec.failures:
                span.set_status(Status(StatusCode.ERROR, f"{rec.failures} failed call(s)"))
            span.end(end_time=end)
            t = end
        if is_error:
            root.set_status(Status(StatusCode.ERROR, error or "query failed"))
        root.end(end_time=start + int(latency * 1e9))
        return True
