"""Optional OpenTelemetry spans per stage, with GenAI semantic-convention attributes and the stage's cost.

Tail sampling: a query's spans are emitted after it finishes, so the decision can keep every
error and every query slower than the running p95, plus ``fraction`` of the rest. The p95 is
seeded from the ledger's recent queries (:func:`recent_latencies`), so a new process does not
keep everything while it learns. The decision (:func:`should_keep`) and the attributes
(:func:`span_attributes`) are pure and need no OTel. Stage spans are laid end to end from the
query's start: the runner records durations, not offsets. A generate attempt's span lasts its
own request (``e2e_s``), not the busy period it shared. The root span's cost is the query's
stage shares plus its amortised storage.

A query's latency, live and from the ledger alike, is the sum of the wall seconds of the
distinct calls (by ``call_id``) that served it (:func:`query_latency`).
"""

from __future__ import annotations

import random
import time
from collections import deque
from datetime import timedelta
from typing import Any, Iterable, Mapping, Optional, Sequence

from ragcost.cost.stats import percentile

from ragcost.records import UsageRecord
from ragcost.errors import DependencyError, StoreError

INSTALL_HINT = "tracing needs opentelemetry-sdk: pip install 'ragcost[otel]'"
COST_ATTRIBUTE = "ragcost.cost.usd"
# GenAI operation names for the stages that are model calls; other stages keep their own name.
# A record may name its own (``UsageRecord.operation``: every generate attempt says chat or text_completion).
OPERATION_NAMES = {"embed": "embeddings", "generate": "chat"}
STORAGE_ATTRIBUTE = "ragcost.storage.usd"
LEDGER_LOOKBACK_DAYS = 30  # how far back the ledger is read to seed the p95


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

    def seed(self, latencies: Iterable[float]) -> None:
        """Start from earlier latencies (oldest first), e.g. the ledger's last ``window`` queries."""
        for x in latencies:
            self.add(x)

    @property
    def value(self) -> Optional[float]:
        if len(self.samples) < self.min_samples:
            return None
        return percentile(self.samples, 95)


def operation_name(record: UsageRecord) -> str:
    return str(record.operation or OPERATION_NAMES.get(record.stage, record.stage))


def query_latency(rows: Iterable[Mapping[str, Any]]) -> float:
    """Seconds of a query: the wall seconds of the distinct calls that served it (rows with ``calls`` 0 add none)."""
    seen: set[str] = set()
    total = 0.0
    for r in rows:
        if not r.get("calls"):
            continue
        cid = r.get("call_id")
        if cid is not None:
            if cid in seen:
                continue
            seen.add(cid)
        total += float(r.get("wall_seconds") or 0.0)
    return total


def recent_latencies(url: str, pipeline: str, limit: int, days: int = LEDGER_LOOKBACK_DAYS) -> list[float]:
    """Latencies of the pipeline's last ``limit`` queried (not evaluated) queries in the ledger, oldest first.

    No ledger yet, no tables, or a ledger that cannot be read gives ``[]``: the run starts without a p95.
    """
    from ragcost.cost.ledger import Ledger, utcnow

    try:
        ledger = Ledger(url, read_only=True)
    except StoreError:
        return []
    import sqlalchemy as sa

    try:
        qrows, srows = ledger.read(since=utcnow() - timedelta(days=days), pipeline=pipeline)
    except sa.exc.SQLAlchemyError:  # unreadable now: sample without history rather than fail the run
        return []
    finally:
        ledger.close()
    by_query: dict[str, list[dict]] = {}
    for r in srows:
        by_query.setdefault(r["query_id"], []).append(r)
    ids = [q["query_id"] for q in qrows if q.get("kind", "query") == "query"][-limit:] if limit > 0 else []
    return [query_latency(by_query.get(qid, [])) for qid in ids]


def cost_attributes(cost_usd: float) -> dict[str, Any]:
    """The proposed OpenTelemetry GenAI cost attributes (semantic-conventions-genai PR 443), beside ours:
    ragcost prices every call from its price book, so the source is always ``local``."""
    return {"gen_ai.usage.cost.amount": float(cost_usd), "gen_ai.usage.cost.currency": "USD",
            "gen_ai.usage.cost.source": "local"}


def span_attributes(record: UsageRecord, cost_usd: float, model: Optional[str] = None) -> dict[str, Any]:
    """The span attributes of one stage call; model and token attributes only where known.

    ``gen_ai.request.model`` is the model the record names (``UsageRecord.model``: a generate
    attempt's served model), else ``model`` (the stage's embedding or re-ranking model); never
    the price-book resource.
    """
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": operation_name(record),
        "ragcost.stage": record.stage,
        "ragcost.resource": record.resource,
        "ragcost.items": record.items,
        "ragcost.retries": record.retries,
        "ragcost.failures": record.failures,
        COST_ATTRIBUTE: float(cost_usd),
        **cost_attributes(cost_usd),
    }
    name = record.model or model
    if name:
        attrs["gen_ai.request.model"] = str(name)
    if record.tokens_estimated:
        attrs["ragcost.tokens_estimated"] = True
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
                 window: int = 1000, min_samples: int = 20, history: Iterable[float] = ()):
        trace = _otel_trace()
        self._trace = trace
        self.tracer = trace.get_tracer("ragcost", tracer_provider=tracer_provider)
        self.fraction = fraction
        self.rng = random.Random(seed)
        self.p95 = RunningP95(window, min_samples)
        self.p95.seed(history)  # earlier queries' latencies (the ledger's), oldest first

    def record_query(self, query_id: str, records: Sequence[UsageRecord], costs: Sequence[float], latency: float,
                     is_error: bool = False, start_ns: Optional[int] = None, error: Optional[str] = None,
                     storage_usd: float = 0.0, models: Optional[Mapping[str, str]] = None, context: Any = None) -> bool:
        """Decide, then emit the query's spans if kept; the latency joins the running p95 either way.

        ``storage_usd`` is the query's amortised storage (in the root span's cost); ``models`` maps
        a stage name to its model, for records that do not name theirs; ``context`` is the parent's
        (``ragcost serve``: the request's server span), else the current one.
        """
        keep = should_keep(latency, is_error, self.p95.value, self.fraction, self.rng)
        self.p95.add(latency)
        if not keep:
            return False
        from opentelemetry.trace import Status, StatusCode

        start = start_ns if start_ns is not None else time.time_ns() - int(latency * 1e9)
        root = self.tracer.start_span("rag.query", context=context, start_time=start, attributes={
            "ragcost.query_id": query_id, COST_ATTRIBUTE: float(sum(costs)) + float(storage_usd),
            STORAGE_ATTRIBUTE: float(storage_usd), **cost_attributes(float(sum(costs)) + float(storage_usd))})
        ctx = self._trace.set_span_in_context(root)
        t = start
        models = models or {}
        for rec, cost in zip(records, costs):
            own = rec.e2e_s  # an attempt lasts its own request, not the period it shared
            end = t + int((rec.wall_seconds if own is None else own) * 1e9)
            span = self.tracer.start_span(f"{operation_name(rec)} {rec.stage}", context=ctx, start_time=t,
                                          attributes=span_attributes(rec, cost, models.get(rec.stage)))
            if rec.failures:
                span.set_status(Status(StatusCode.ERROR, f"{rec.failures} failed call(s)"))
            span.end(end_time=end)
            t = end
        if is_error:
            root.set_status(Status(StatusCode.ERROR, error or "query failed"))
        root.end(end_time=start + int(latency * 1e9))
        return True
