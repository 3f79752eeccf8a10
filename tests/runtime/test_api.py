"""One query path: ``ragcost.open()``, ``ragcost query`` and ``ragcost serve`` run their batches on ``Session``.

So the ledger's rows, the tracing spans and the lifetime of the capacity held come from one place: an API session
emits its spans and records its lifetime (its hours reach the bill), every path writes the judge that counted the
useful documents, and a ``--queries`` line's ``_id`` is kept as the ledger's ``source_id``. On the tiny hashing
embedder (tests/evaluate/conftest.py): what is checked is the path, not the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

import tests.evaluate.conftest  # noqa: F401  (registers the test-hashing embedder)
from tests.cli.conftest import write_corpus, write_pipeline


def _pipeline(folder: Path, **overrides) -> Path:
    write_corpus(folder / "kb.jsonl")
    return write_pipeline(folder, embed={"type": "test-hashing", "batch_size": 16}, **overrides)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline

    folder = tmp_path_factory.mktemp("api")
    p = _pipeline(folder, tracing={"enabled": True, "sample_fraction": 1.0})
    pipe = Pipeline.load(p)
    try:
        run_index(pipe)
    finally:
        pipe.close()
    return folder, p


def _rows(folder: Path, sql: str) -> list[dict]:
    engine = sa.create_engine(f"duckdb:///{folder / 'kb.duckdb'}")
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.text(sql))]
    finally:
        engine.dispose()


def test_an_api_session_with_tracing_on_emits_a_span_and_records_its_lifetime_from_open_to_close(indexed, query_spans):
    import ragcost

    folder, p = indexed
    with ragcost.open(p) as s:
        a = s.query("how do I get a refund", k=2)
        b = s.query("reset my password", k=2)
        life = _rows(folder, "SELECT * FROM rc_ledger_lifetimes WHERE kind = 'session'")
        assert len(life) == 1 and life[0]["stopped_at"] is None  # held while open
    roots = {sp.attributes["ragcost.query_id"]: sp for sp in query_spans.get_finished_spans() if sp.name == "rag.query"}
    assert set(roots) == {a.id, b.id}
    for ans in (a, b):  # the span's dollars are the ledger row's: one pricing
        assert roots[ans.id].attributes["ragcost.cost.usd"] == pytest.approx(ans.cost, rel=1e-12)
    (life,) = _rows(folder, "SELECT * FROM rc_ledger_lifetimes WHERE kind = 'session'")
    assert life["started_at"] <= life["ready_at"] <= life["stopped_at"]  # loading was its start-up
    assert life["run_id"] == _rows(folder, f"SELECT run_id FROM rc_ledger_queries WHERE query_id = '{a.id}'")[0]["run_id"]
    q = _rows(folder, f"SELECT useful_judge, source_id FROM rc_ledger_queries WHERE query_id = '{a.id}'")[0]
    assert q["useful_judge"] and q["source_id"] is None  # the judge is written on every path; no caller id given


def test_a_session_that_writes_no_ledger_still_traces_and_records_no_lifetime(indexed, query_spans):
    import ragcost

    folder, p = indexed
    before = len(_rows(folder, "SELECT * FROM rc_ledger_lifetimes"))
    with ragcost.open(p, write_ledger=False) as s:
        a = s.query("api limits")
    assert [sp.attributes["ragcost.query_id"] for sp in query_spans.get_finished_spans() if sp.name == "rag.query"] == [a.id]
    assert len(_rows(folder, "SELECT * FROM rc_ledger_lifetimes")) == before


def test_the_cli_keeps_each_queries_id_and_the_same_file_run_twice_never_collides(indexed, tmp_path):
    from ragcost.cli.main import main

    folder, p = indexed
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in
                             (("refund-1", "refund"), ("pw-2", "password reset"), ("api-3", "rate limits"))))
    for _ in range(2):
        assert main(["query", str(p), "--queries", str(qfile), "--json"]) == 0
    rows = _rows(folder, "SELECT query_id, source_id, run_id, useful_judge FROM rc_ledger_queries "
                         "WHERE source_id IS NOT NULL ORDER BY source_id")
    assert sorted(r["source_id"] for r in rows) == sorted(["api-3", "pw-2", "refund-1"] * 2)
    assert len({r["query_id"] for r in rows}) == 6 and len({r["run_id"] for r in rows}) == 2
    assert all(r["useful_judge"] for r in rows)
    batch = _rows(folder, "SELECT * FROM rc_ledger_lifetimes WHERE kind = 'batch'")
    assert len(batch) == 2 and all(b["stopped_at"] is not None for b in batch)


def test_serve_records_its_own_lifetime_and_spans_not_the_sessions(indexed):
    from ragcost.serve.service import Service

    _, p = indexed
    svc = Service(p, ledger_url=None)
    try:
        assert svc.session.lifetime_kind is None and svc.session.tracer is None
    finally:
        svc.session.close()
