"""A server span per HTTP request, of every status, parent of the query's own spans, its cost the ledger's.

Real uvicorn servers in this process, their spans caught by the OpenTelemetry SDK's in-memory
exporter; costs are compared with the rows the server wrote to its ledger.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from tests.serve.conftest import ServerThread, ledger_rows, variant  # noqa: E402

ACME = {"authorization": "Bearer key-acme"}
CHAT = {"model": "kb", "messages": [{"role": "user", "content": "how do I get a refund?"}]}
TRACED = {"enabled": True, "sample_fraction": 1.0}


def _exporter():
    exp = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    return exp, provider


@pytest.fixture(scope="module")
def traced(kb_served):
    exp, provider = _exporter()
    p = variant(kb_served, "traced.yaml", tracing=TRACED, serve={"batch_window_ms": 5, "keys": "file:keys.json"})
    with ServerThread(p, tracer_provider=provider) as s:
        yield s, p, exp


@pytest.fixture(scope="module")
def traced_slow(kb_served):
    """One request at a time, a word every 50 ms, a 1 s deadline: for 429 and 504."""
    exp, provider = _exporter()
    p = variant(kb_served, "traced-slow.yaml", tracing=TRACED,
                stages=[{"type": "retrieve", "k": 3}, {"type": "generate", "backend": "slow-words"}],
                serve={"batch_window_ms": 0, "max_queue": 1, "deadline_s": 1, "admission": "queue", "keys": "file:keys.json"})
    with ServerThread(p, tracer_provider=provider) as s:
        yield s, p, exp


def _server_spans(exp, n: int, within_s: float = 10.0):
    """The server spans once ``n`` have ended (a stream's ends just after its last byte)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        spans = [x for x in exp.get_finished_spans() if x.kind == SpanKind.SERVER]
        if len(spans) >= n:
            time.sleep(0.05)  # none more should come
            return [x for x in exp.get_finished_spans() if x.kind == SpanKind.SERVER]
        time.sleep(0.02)
    return [x for x in exp.get_finished_spans() if x.kind == SpanKind.SERVER]


def _ledger(p, query_id: str) -> tuple[float, list[dict]]:
    """The query's cost and its stage rows, from the ledger."""
    qrows, srows = ledger_rows(p)
    return next(q["cost_usd"] for q in qrows if q["query_id"] == query_id), [r for r in srows if r["query_id"] == query_id]


def _children(exp, span):
    return [x for x in exp.get_finished_spans() if x.parent is not None and x.parent.span_id == span.context.span_id]


def _stream(url: str) -> int:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/v1/chat/completions", headers=ACME, json=body) as r:
        for _ in r.iter_lines():
            pass
        return r.status_code


class TestOneSpanPerRequest:
    @pytest.mark.parametrize("route,status,send", [
        ("/v1/query", 200, lambda u: httpx.post(u + "/v1/query", headers=ACME, json={"text": "refund"}).status_code),
        ("/v1/chat/completions", 200, lambda u: httpx.post(u + "/v1/chat/completions", headers=ACME, json=CHAT).status_code),
        ("/v1/chat/completions", 200, _stream),
        ("/v1/query", 400, lambda u: httpx.post(u + "/v1/query", headers=ACME, json={"text": " "}).status_code),
        ("/v1/query", 401, lambda u: httpx.post(u + "/v1/query", json={"text": "refund"}).status_code),
        ("/v1/chat/completions", 404, lambda u: httpx.post(u + "/v1/chat/completions", headers=ACME,
                                                           json={**CHAT, "model": "x"}).status_code),
        ("other", 404, lambda u: httpx.get(u + "/nothing/here").status_code),
        ("/healthz", 200, lambda u: httpx.get(u + "/healthz").status_code),
    ])
    def test_each_request_has_one_server_span_with_its_route_and_status(self, traced, route, status, send):
        s, p, exp = traced
        exp.clear()
        assert send(s.url) == status
        spans = _server_spans(exp, 1)
        assert len(spans) == 1, [x.name for x in spans]
        a = spans[0].attributes
        assert (a["http.route"], a["http.response.status_code"]) == (route, status)
        assert spans[0].name.endswith(route)
        if status >= 400:
            assert a["error.type"] == str(status)
        if route.startswith("/v1/") and status != 401 and route != "other":
            assert a["ragcost.tenant"] == "acme"
        if status == 200 and route.startswith("/v1/"):
            assert a["gen_ai.operation.name"] == ("chat" if "chat" in route else "rag.query")
            assert a["gen_ai.request.model"] == "kb"
            # the request's cost is its ledger row's (the query's share of every call, storage included)
            cost, rows = _ledger(p, a["ragcost.query_id"])
            assert cost > 0 and a["gen_ai.usage.cost.amount"] == pytest.approx(cost, rel=1e-12, abs=0)
            # tokens as the generate rows have them (the extractive generator reports none: then no attribute)
            gen = [r for r in rows if r["stage"] == "generate"]
            assert gen and a.get("gen_ai.usage.output_tokens") == (
                None if all(r["output_tokens"] is None for r in gen) else sum(r["output_tokens"] or 0 for r in gen))
            assert a["gen_ai.usage.cost.currency"] == "USD" and a["ragcost.cost.usd"] == a["gen_ai.usage.cost.amount"]
            # parent of the query's span, itself parent of the stage spans
            query = [x for x in _children(exp, spans[0]) if x.name == "rag.query"]
            assert len(query) == 1 and query[0].attributes["ragcost.query_id"] == a["ragcost.query_id"]
            stages = {x.attributes["ragcost.stage"] for x in _children(exp, query[0])}
            assert {"retrieve", "generate"} <= stages, stages
        else:
            assert "gen_ai.usage.cost.amount" not in a and not _children(exp, spans[0])

    def test_a_callers_traceparent_is_continued(self, traced):
        s, _, exp = traced
        exp.clear()
        trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        r = httpx.post(s.url + "/v1/query", headers={**ACME, "traceparent": f"00-{trace_id}-{parent}-01"}, json={"text": "refund"})
        assert r.status_code == 200
        (span,) = _server_spans(exp, 1)
        assert f"{span.context.trace_id:032x}" == trace_id and f"{span.parent.span_id:016x}" == parent


class TestRefusedAndLate:
    def test_429_and_504_each_have_a_span_with_their_status(self, traced_slow):
        s, p, exp = traced_slow
        exp.clear()

        async def burst(n):
            async with httpx.AsyncClient(base_url=s.url, timeout=30) as c:
                rs = await asyncio.gather(*(c.post("/v1/query", headers=ACME, json={"text": f"refund {i}"}) for i in range(n)))
            return [r.status_code for r in rs]

        codes = asyncio.run(burst(8))
        assert 429 in codes
        spans = _server_spans(exp, len(codes))
        assert sorted(x.attributes["http.response.status_code"] for x in spans) == sorted(codes)
        refused = [x for x in spans if x.attributes["http.response.status_code"] == 429]
        assert all(x.attributes["ragcost.outcome"] == "overloaded" and x.status.status_code == StatusCode.UNSET for x in refused)
        time.sleep(1.5)  # the abandoned batches end
        exp.clear()
        r = httpx.post(s.url + "/v1/query", headers=ACME, json={"text": "refund within 30 days " * 30}, timeout=30)
        assert r.status_code == 504
        (late,) = _server_spans(exp, 1)
        assert late.attributes["http.response.status_code"] == 504 and late.status.status_code == StatusCode.ERROR
