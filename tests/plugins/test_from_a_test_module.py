"""A new guard, re-ranker and stage -- one class and one registration each, in this module alone --
run in a pipeline YAML through the CLI with no other file touched.

(The same for an index backend is tests/index/test_plugin_index.py, for a generator
tests/generate/test_new_backend.py.)
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from pydantic import Field

from ragcost.guards.base import Finding, TextGuard, guard_registry
from ragcost.records import QueryState, UsageRecord
from ragcost.stages.base import Stage, StageParams, stage_registry
from ragcost.stages.rerank.base import Reranker, RerankerParams, reranker_registry
from tests.cli.conftest import run_cli, write_corpus, write_pipeline


@guard_registry.register("shouting", replace=True)
class Shouting(TextGuard):
    """Blocks queries written in capitals."""

    name = "shouting"
    targets = ("query",)
    default_policy = "block"

    def scan(self, text: str) -> list[Finding]:
        letters = [c for c in text if c.isalpha()]
        if letters and all(c.isupper() for c in letters):
            return [Finding(self.name, "shouting", 1.0, reason="the query is all capitals")]
        return []


class TitleFirstParams(RerankerParams):
    boost: float = Field(1.0, description="added to hits whose title shares a word with the query")


@reranker_registry.register("title-first", replace=True)
class TitleFirst(Reranker):
    """Boosts hits whose title shares a word with the query."""

    name = "title-first"
    Params = TitleFirstParams

    def rerank(self, batch: list[QueryState], usage: UsageRecord) -> None:
        n = 0
        for s in batch:
            words = set(s.text.lower().split())
            for h in s.hits:
                h.score = float(h.score) + (self.params.boost if words & set(h.title.lower().split()) else 0.0)
                n += 1
        usage.notes["rerank"] = {"scored": n, "batches": 1}


class CannedParams(StageParams):
    answers: dict[str, str] = Field(default_factory=dict, description="exact query text -> answer")


@stage_registry.register("canned", replace=True)
class Canned(Stage):
    """Answers known questions itself: finishes them before retrieval, as a cache hit would."""

    type = "canned"
    Params = CannedParams
    placement = "before-generate"

    def run(self, batch: list[QueryState], usage: UsageRecord) -> None:
        for s in batch:
            if s.text in self.params.answers:
                s.finish(self.name, answer=self.params.answers[s.text])


def test_new_guard_reranker_and_early_finishing_stage_run_from_yaml(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path, stages=[
        {"type": "guard", "on": "query", "checks": ["shouting"]},
        {"type": "canned", "answers": {"hello": "Hi! Ask me about billing."}},
        {"type": "retrieve", "k": 3},
        {"type": "rerank", "backend": "title-first", "boost": 2.0},
    ])
    assert run_cli(capsys, "index", p)[0] == 0
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in
                               [("a", "hello"), ("b", "WHERE IS MY INVOICE"), ("c", "invoice download")]) + "\n")
    code, out, err = run_cli(capsys, "query", p, "--queries", qfile, "--json")
    assert code == 0, err
    res = {q["id"]: q for q in json.loads(out)["queries"]}
    assert res["a"]["answer"] == "Hi! Ask me about billing." and res["a"]["hits"] == []
    assert res["b"]["error"].startswith("blocked by guard shouting")
    assert res["c"]["hits"][0]["title"] == "Invoice download" and res["c"]["hits"][0]["score"] > 2.0

    engine = sa.create_engine(f"duckdb:///{tmp_path / 'kb.duckdb'}")
    with engine.connect() as c:
        rows = {r.text: r for r in c.execute(sa.text("select text, ok, outcome, outcome_stage from rc_ledger_queries"))}
        stages = {t: [r[0] for r in c.execute(sa.text(
            "select s.stage from rc_ledger_stage_calls s join rc_ledger_queries q using (query_id) where q.text = :t "
            "order by s.seq"), {"t": t})] for t in rows}
    engine.dispose()
    assert (rows["hello"].outcome, rows["hello"].outcome_stage, rows["hello"].ok) == ("finished", "canned", True)
    assert (rows["WHERE IS MY INVOICE"].outcome, rows["WHERE IS MY INVOICE"].ok) == ("blocked", False)
    assert rows["invoice download"].outcome == "continued"
    # A finished query pays for what ran before it finished, and nothing after.
    assert "retrieve" not in stages["hello"] and "canned" in stages["hello"]
    # (the run's CPU outside stage calls is its own `overhead` row, docs/the-bill.md)
    assert [s for s in stages["invoice download"] if s != "overhead"][-2:] == ["rerank:title-first", "storage"]


def test_a_stage_that_must_answer_before_generation_is_refused_after_it(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path, stages=[{"type": "retrieve"}, {"type": "generate"}, {"type": "canned"}])
    code, _, err = run_cli(capsys, "validate", p)
    assert code == 1 and "'canned' after generate cannot save anything" in err and f"{p}:" in err
    assert err.count("\n") == 1
