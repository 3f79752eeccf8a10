"""The runner and the ledger agree to the dollar, also when a stage stops a query mid-pipeline."""

from __future__ import annotations

import sqlalchemy as sa

from ragcost.records import UsageRecord
from ragcost.runtime.indexing import run_index
from ragcost.runtime.pipeline import Pipeline
from ragcost.runtime.query import run_queries
from ragcost.records import QueryState
from ragcost.stages.base import Stage, stage_registry
from tests.cli.conftest import write_corpus, write_pipeline


@stage_registry.register("test-stop-second")
class StopSecond(Stage):
    """Stops the second query of a batch, as a blocking guard would."""

    type = "test-stop-second"

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        if len(batch) > 1:
            batch[1].error = "stopped by test"
        return batch


def test_ledger_rows_add_up_to_the_run_and_a_stopped_query_pays_only_what_it_used(tmp_path):
    write_corpus(tmp_path / "kb.jsonl")
    path = write_pipeline(tmp_path, stages=[{"type": "test-stop-second"}, {"type": "retrieve", "k": 3}])
    pipe = Pipeline.load(path)
    try:
        run_index(pipe)
        run = run_queries(pipe, [("a", "refund"), ("b", "password"), ("c", "api limits")])
    finally:
        pipe.close()
    engine = sa.create_engine(pipe.config.store_url)
    with engine.connect() as c:
        rows = c.execute(sa.text(
            "select q.text, q.ok, s.stage, s.cost_usd from rc_ledger_stage_calls s join rc_ledger_queries q using (query_id)"
        )).fetchall()
    engine.dispose()
    assert abs(sum(r.cost_usd for r in rows) - run.total_usd) < 1e-12
    stages_of = {}
    for r in rows:
        stages_of.setdefault(r.text, set()).add(r.stage)
    assert "retrieve" not in stages_of["password"]
    assert {"embed", "test-stop-second", "retrieve", "storage"} <= stages_of["refund"]
    assert [s.error for s in run.states] == [None, "stopped by test", None]


def test_tracing_emits_a_span_per_stage_with_genai_attributes_and_cost(tmp_path):
    pytest = __import__("pytest")
    sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="needs opentelemetry-sdk (pip install 'ragcost[otel]')")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    write_corpus(tmp_path / "kb.jsonl")
    path = write_pipeline(tmp_path, tracing={"enabled": True, "sample_fraction": 1.0})
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    from opentelemetry import trace

    trace.set_tracer_provider(provider)
    pipe = Pipeline.load(path)
    try:
        run_index(pipe)
        run_queries(pipe, [("a", "refund"), ("b", "password")], write_ledger=False)
    finally:
        pipe.close()
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.name == "rag.query"]
    assert len(roots) == 2
    embed = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "embeddings"]
    assert len(embed) == 2 and all(s.attributes["gen_ai.usage.input_tokens"] > 0 for s in embed)
    assert all(s.attributes["ragcost.cost.usd"] > 0 for s in embed)


def test_in_process_the_last_batchs_ledger_write_is_charged_to_that_batch(tmp_path):
    """Each batch's ledger write is claimed by the next batch's overhead; the last one's, in a process the run does
    not own (the Python API, a test), was charged to nobody (issue 41: a CLI process charges it at exit). It is now
    an overhead call shared by the last batch, in the result and in the ledger, and the two still agree."""
    write_corpus(tmp_path / "kb.jsonl")
    path = write_pipeline(tmp_path, stages=[{"type": "retrieve", "k": 3}])
    pipe = Pipeline.load(path)
    try:
        run_index(pipe)
        run = run_queries(pipe, [(f"q{i}", t) for i, t in enumerate(["refund", "password", "api limits", "invoice", "login"])],
                          batch_size=2)
    finally:
        pipe.close()
    tail = [c for c in run.calls if c.record.notes.get("what") == "the last batch's ledger write"]
    assert len(tail) == 1 and [s.text for s in tail[0].served] == ["login"] and tail[0].record.cpu_seconds > 0
    engine = sa.create_engine(pipe.config.store_url)
    with engine.connect() as c:
        rows = c.execute(sa.text("select q.text, s.stage, s.cost_usd, s.seq from rc_ledger_stage_calls s "
                                 "join rc_ledger_queries q using (query_id)")).fetchall()
        per_query = c.execute(sa.text("select sum(cost_usd) from rc_ledger_queries")).scalar()
    engine.dispose()
    assert [r.text for r in rows if r.seq >= 1000] == ["login"]  # added after the query's own rows
    assert abs(sum(r.cost_usd for r in rows) - run.total_usd) < 1e-12 and abs(per_query - run.total_usd) < 1e-12


def test_each_batch_is_one_ledger_transaction_and_a_failed_batch_leaves_the_earlier_ones_whole(tmp_path, monkeypatch):
    from ragcost.cost.ledger import Ledger

    write_corpus(tmp_path / "kb.jsonl")
    path = write_pipeline(tmp_path)
    pipe = Pipeline.load(path)
    writes: list[int] = []
    real = Ledger.record_queries

    def counted(self, run_id, items):
        writes.append(len(items))
        if len(writes) == 3:  # the third batch's write fails inside its transaction, after its query rows went in
            bad = dict(items[-1][1][0], input_tokens="not a number")
            items = [*items[:-1], (items[-1][0], [*items[-1][1], bad])]
        return real(self, run_id, items)

    monkeypatch.setattr(Ledger, "record_queries", counted)
    texts = [(f"q{i}", t) for i, t in enumerate(["refund", "password", "api limits", "invoice", "login", "export",
                                                  "billing", "reset", "quota"])]
    try:
        run_index(pipe)
        try:
            run_queries(pipe, texts, batch_size=4)
        except sa.exc.DBAPIError:
            pass
        else:
            raise AssertionError("the third batch's failed write was not raised")
    finally:
        pipe.close()
    assert writes == [4, 4, 1]  # one transaction a batch, not one a query
    engine = sa.create_engine(pipe.config.store_url)
    with engine.connect() as c:
        got = [r.text for r in c.execute(sa.text("select text from rc_ledger_queries"))]
        orphans = c.execute(sa.text("select count(*) from rc_ledger_stage_calls s left join rc_ledger_queries q "
                                    "using (query_id) where q.query_id is null")).scalar()
    engine.dispose()
    assert sorted(got) == sorted(t for _, t in texts[:8]) and orphans == 0  # two whole batches, nothing of the third
