"""Tracing: a pure, tail-based sampling decision; spans with GenAI attributes and the stage's cost."""

from __future__ import annotations

import random
import sys

import pytest

from ragcost.cost.tracing import COST_ATTRIBUTE, STORAGE_ATTRIBUTE, RunningP95, query_latency, recent_latencies, should_keep, span_attributes
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

    def test_seeded_history_gives_a_p95_before_any_new_query(self):
        p = RunningP95(window=100, min_samples=20)
        p.seed(float(i) for i in range(1, 101))
        assert p.value == pytest.approx(95.05)


class TestAttributes:
    def test_genai_attributes_and_cost(self):
        r = U("generate", "openai-gpt-4o-mini", input_tokens=100, cached_input_tokens=30, output_tokens=7,
              model="gpt-4o-mini", operation="chat")
        a = span_attributes(r, 0.0012)
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "gpt-4o-mini"
        assert a["gen_ai.usage.input_tokens"] == 130 and a["gen_ai.usage.cache_read.input_tokens"] == 30
        assert a["gen_ai.usage.output_tokens"] == 7 and a[COST_ATTRIBUTE] == 0.0012

    def test_the_proposed_genai_cost_attributes_sit_beside_ours(self):
        a = span_attributes(U("generate", "openai-gpt-4o-mini", input_tokens=100, output_tokens=7), 0.0012)
        assert a["gen_ai.usage.cost.amount"] == a[COST_ATTRIBUTE] == 0.0012
        assert a["gen_ai.usage.cost.currency"] == "USD" and a["gen_ai.usage.cost.source"] == "local"

    def test_unknown_counts_are_left_out_not_zero(self):
        a = span_attributes(U("embed", "cpu", input_tokens=10, model="all-MiniLM-L6-v2"), 0.0)
        assert a["gen_ai.operation.name"] == "embeddings" and a["gen_ai.request.model"] == "all-MiniLM-L6-v2"
        assert "gen_ai.usage.cache_read.input_tokens" not in a and "gen_ai.usage.output_tokens" not in a


    def test_the_request_model_is_the_served_model_never_the_price_book_resource(self):
        served = span_attributes(U("generate", "cpu", model="my-7b", operation="chat"), 0.0)
        assert served["gen_ai.request.model"] == "my-7b"
        assert span_attributes(U("rerank", "cpu"), 0.0, model="./models/ce")["gen_ai.request.model"] == "./models/ce"
        assert "gen_ai.request.model" not in span_attributes(U("retrieve", "cpu"), 0.0)  # no model: left out

    def test_a_fallback_attempt_keeps_its_genai_operation(self):
        a = span_attributes(U("generate/vllm:small", "gpu", model="small", operation="chat"), 0.0)
        assert a["gen_ai.operation.name"] == "chat" and a["ragcost.stage"] == "generate/vllm:small"
        b = span_attributes(U("answer/b", "gpu", operation="text_completion"), 0.0)
        assert b["gen_ai.operation.name"] == "text_completion"
        assert span_attributes(U("generate/overhead", "cpu"), 0.0)["gen_ai.operation.name"] == "generate/overhead"

    def test_estimated_tokens_are_marked(self):
        assert span_attributes(U("generate", "api", input_tokens=5, tokens_estimated=True), 0.0)["ragcost.tokens_estimated"]


class TestLatency:
    def test_a_query_takes_the_wall_of_each_distinct_call_that_served_it(self):
        rows = [{"call_id": "e", "calls": 1, "wall_seconds": 0.5}, {"call_id": "p", "calls": 1, "wall_seconds": 2.0},
                {"call_id": "p", "calls": 1, "wall_seconds": 2.0},  # two attempts of one busy period
                {"call_id": "s", "calls": 0, "wall_seconds": 0.0}]  # storage: not a call
        assert query_latency(rows) == 2.5


def _write_ledger(url: str, pipeline: str, walls: list[float], kind: str = "query") -> None:
    from ragcost.cost.ledger import Ledger

    with Ledger(url) as led:
        run = led.start_run(kind, pipeline, "v1")
        for i, w in enumerate(walls):
            rows = [{"stage": "retrieve", "resource": "cpu", "wall_seconds": w, "cost_usd": 0.0, "call_id": f"c{i}"},
                    {"stage": "storage", "resource": "storage", "wall_seconds": 0.0, "calls": 0, "cost_usd": 0.0}]
            led.record_query(run, {"text": f"q{i}", "ok": True}, rows)


class TestLedgerHistory:
    def test_the_last_queries_of_the_pipeline_seed_the_p95(self, any_store_url):
        import uuid

        kb = f"kb-{uuid.uuid4().hex[:8]}"  # PostgreSQL's ledger is shared by tests: a pipeline of our own
        _write_ledger(any_store_url, kb, [0.1] * 5 + [float(i) for i in range(1, 31)])
        _write_ledger(any_store_url, "other", [99.0] * 3)
        _write_ledger(any_store_url, kb, [77.0], kind="eval")
        assert recent_latencies(any_store_url, kb, 30) == [float(i) for i in range(1, 31)]
        assert recent_latencies(any_store_url, kb, 0) == []

    def test_no_ledger_yet_is_no_history(self, tmp_path):
        assert recent_latencies(f"duckdb:///{tmp_path / 'none.duckdb'}", "kb", 100) == []
        assert not (tmp_path / "none.duckdb").exists()

    def test_a_new_process_traces_by_the_ledger_p95_not_everything(self, tmp_path):
        pytest.importorskip("opentelemetry.sdk")
        from types import SimpleNamespace

        from ragcost.runtime.api import _tracer

        url = f"duckdb:///{tmp_path / 'ledger.duckdb'}"
        _write_ledger(url, "kb", [1.0] * 30)
        tracing = SimpleNamespace(enabled=True, sample_fraction=0.0)
        pipe = SimpleNamespace(config=SimpleNamespace(tracing=tracing, name="kb", store_url=url))
        tracer = _tracer(pipe, None)
        assert tracer.p95.value == pytest.approx(1.0)
        assert not tracer.record_query("fast", [U("retrieve", "cpu", wall_seconds=0.5)], [0.0], latency=0.5)


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

    def test_the_root_cost_includes_storage_and_attempt_spans_last_their_own_request(self):
        pytest.importorskip("opentelemetry.sdk")
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from ragcost.cost.tracing import QueryTracer

        exp = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exp))
        tr = QueryTracer(fraction=1.0, tracer_provider=provider)
        recs = [U("rerank", "cpu", wall_seconds=0.01),
                U("generate/vllm:small", "gpu", wall_seconds=0.3, model="small", operation="chat", e2e_s=0.1)]
        assert tr.record_query("q", recs, [0.002, 0.003], latency=0.31, storage_usd=0.0005, models={"rerank": "./ce"})
        spans = {s.name: s for s in exp.get_finished_spans()}
        root = spans["rag.query"]
        assert root.attributes[COST_ATTRIBUTE] == pytest.approx(0.0055) and root.attributes[STORAGE_ATTRIBUTE] == 0.0005
        gen = spans["chat generate/vllm:small"]
        assert gen.attributes["gen_ai.request.model"] == "small" and (gen.end_time - gen.start_time) == pytest.approx(0.1e9, abs=2)
        assert spans["rerank rerank"].attributes["gen_ai.request.model"] == "./ce"


@pytest.mark.slow  # builds an index with the packaged MiniLM (about 25 s on a loaded 2-core host)
def test_a_query_run_traces_models_and_storage_and_the_next_run_starts_from_the_ledger(tmp_path, query_spans):
    import ragcost.cost.tracing as tracing
    from ragcost.runtime.api import _tracer
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline
    from ragcost.runtime.query import run_queries
    from tests.cli.conftest import write_corpus, write_pipeline

    exp = query_spans
    write_corpus(tmp_path / "kb.jsonl")
    pipe = Pipeline.load(write_pipeline(tmp_path, tracing={"enabled": True, "sample_fraction": 1.0}))
    try:
        run_index(pipe)
        run = run_queries(pipe, [("a", "refund"), ("b", "password"), ("c", "api limits")])
        seeded = _tracer(pipe, None)  # what the next process starts from
    finally:
        pipe.close()
    spans = exp.get_finished_spans()
    roots = [s for s in spans if s.name == "rag.query"]
    assert len(roots) == 3
    # one batch, split by what each query used (the embed call by tokens): the three roots add up to the run
    assert sum(r.attributes[COST_ATTRIBUTE] for r in roots) == pytest.approx(run.total_usd, rel=1e-9)
    assert all(r.attributes[COST_ATTRIBUTE] > 0 and r.attributes[STORAGE_ATTRIBUTE] > 0 for r in roots)
    embed = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "embeddings"]
    assert {s.attributes["gen_ai.request.model"] for s in embed} == {"all-MiniLM-L6-v2"}
    latencies = [tracing.query_latency({"call_id": c.call_id, "calls": c.record.calls, "wall_seconds": c.record.wall_seconds}
                                       for c in run.calls if c.serves(s)) for s in run.states]
    assert list(seeded.p95.samples) == pytest.approx(latencies)
