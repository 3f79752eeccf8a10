"""Tracing: a pure, tail-based sampling decision; spans with GenAI attributes and the stage's cost."""

from __future__ import annotations

import random
import sys

import pytest

from ragcost.cost.tracing import COST_ATTRIBUTE, RunningP95, should_keep, span_attributes
from ragcost.records import UsageRecord as U
from ragcost.errors import DependencyError


class TestShouldKeep:
    def test_errors_and_slow_queries_are_always_kept(self):
        rng = random.Random(0)
        assert should_keep(0.1, True, 1.0, 0.0, rng)
        assert should_keep(1.5, False, 1.0, 0.0, rng)
        assert not should_keep(0.5, False, 1.0, 0.0, rng)

    def test_unknown_p95_keeps_everything(self):
        assert should_keep(0.1, False, None, 0.0, random.Random(0))

    def test_fraction_of_the_rest(self):
        rng = random.Random(42)
        kept = sum(should_keep(0.5, False, 1.0, 0.1, rng) for _ in range(10_000))
        assert 850 < kept < 1150
        assert all(should_keep(0.5, False, 1.0, 1.0, rng) for _ in range(100))


class TestRunningP95:
    def test_none_until_enough_samples_then_windowed(self):
        p = RunningP95(window=100, min_samples=20)
        for i in range(19):
            p.add(i)
        assert p.value is None
        for i in range(1, 101):
            p.add(i)
        assert p.value == pytest.approx(95.05)


class TestAttributes:
    def test_genai_attributes_and_cost(self):
        r = U("generate", "openai-gpt-4o-mini", input_tokens=100, cached_input_tokens=30, output_tokens=7)
        a = span_attributes(r, 0.0012)
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "openai-gpt-4o-mini"
        assert a["gen_ai.usage.input_tokens"] == 130 and a["gen_ai.usage.cache_read.input_tokens"] == 30
        assert a["gen_ai.usage.output_tokens"] == 7 and a[COST_ATTRIBUTE] == 0.0012

    def test_unknown_counts_are_left_out_not_zero(self):
        a = span_attributes(U("embed", "cpu", input_tokens=10, notes={"model": "all-MiniLM-L6-v2"}), 0.0)
        assert a["gen_ai.operation.name"] == "embeddings" and a["gen_ai.request.model"] == "all-MiniLM-L6-v2"
        assert "gen_ai.usage.cache_read.input_tokens" not in a and "gen_ai.usage.output_tokens" not in a


def test_missing_opentelemetry_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    from ragcost.cost.tracing import QueryTracer

    with pytest.raises(DependencyError, match=r"pip install 'ragcost\[otel\]'"):
        QueryTracer()


class TestWithOpenTelemetry:
    def test_spans_carry_attributes_and_sampling_applies(self):
        pytest.importorskip("opentelemetry.sdk")
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from ragcost.cost.tracing import QueryTracer

        exp = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exp))
        tr = QueryTracer(fraction=0.0, seed=0, tracer_provider=provider, min_samples=5)
        recs = [U("retrieve", "cpu", wall_seconds=0.01),
                U("generate", "api", wall_seconds=0.2, input_tokens=50, cached_input_tokens=0, output_tokens=9)]
        for i in range(5):  # warm-up: p95 unknown, all kept
            assert tr.record_query(f"w{i}", recs, [0.0, 0.001], latency=0.21)
        assert not tr.record_query("fast", recs, [0.0, 0.001], latency=0.2)
        assert tr.record_query("slow", recs, [0.0, 0.001], latency=5.0)
        assert tr.record_query("err", recs, [0.0, 0.001], latency=0.1, is_error=True, error="boom")
        spans = exp.get_finished_spans()
        assert len(spans) == 7 * 3
        gen = [s for s in spans if s.name == "chat generate"][-1]
        assert gen.attributes["gen_ai.usage.output_tokens"] == 9 and gen.attributes[COST_ATTRIBUTE] == 0.001
        root = [s for s in spans if s.name == "rag.query"][-1]
        assert root.attributes["ragcost.query_id"] == "err" and not root.status.is_ok
        assert gen.parent.span_id == root.context.span_id
