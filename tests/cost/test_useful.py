"""Useful documents per stage: each stage's dollars against the useful documents of the queries it served."""

from __future__ import annotations

import pytest

from ragcost.cost.aggregate import by_stage_of_calls, by_stage_of_rows, useful_by_stage
from ragcost.cost.useful import cost_per_useful, make_judge
from ragcost.records import UsageRecord


class TestUsefulByStage:
    def test_a_batch_call_counts_the_useful_documents_of_every_query_it_served(self):
        embed = UsageRecord(stage="embed", resource="cpu", items=3)
        gen_a = UsageRecord(stage="generate", resource="cpu", items=1)
        gen_b = UsageRecord(stage="generate", resource="cpu", items=1)
        aggs = by_stage_of_calls([(embed, 0.3, ["a", "b", "c"]), (gen_a, 0.2, ["a"]), (gen_b, 0.4, ["b"])])
        useful = useful_by_stage(aggs, {"a": 2, "b": 1, "c": 0})
        assert useful == {"embed": 3, "generate": 3}
        assert cost_per_useful(aggs["generate"].usd, useful["generate"]) == pytest.approx(0.2)

    def test_a_stage_that_served_only_queries_with_nothing_useful_has_no_ratio(self):
        aggs = by_stage_of_calls([(UsageRecord(stage="guard", resource="cpu"), 0.01, ["blocked"])])
        useful = useful_by_stage(aggs, {"blocked": 0, "other": 5})
        assert useful == {"guard": 0} and cost_per_useful(aggs["guard"].usd, 0) is None

    def test_ledger_rows_are_grouped_by_their_query_id(self):
        rows = [{"query_id": q, "stage": "retrieve", "items": 1, "calls": 1, "cost_usd": 0.1, "call_id": q, "wall_seconds": 0.01}
                for q in ("q1", "q2")]
        assert useful_by_stage(by_stage_of_rows(rows), {"q1": 4, "q2": 1, "q3": 7}) == {"retrieve": 5}

    def test_calls_without_query_keys_still_aggregate(self):
        aggs = by_stage_of_calls([(UsageRecord(stage="embed", resource="cpu"), 0.5)])
        assert aggs["embed"].usd == 0.5 and aggs["embed"].query_ids == set()


class TestJudges:
    def test_score_and_cited_judges_count_documents_once(self):
        hits = [{"doc_id": "d1", "score": 0.7}, {"doc_id": "d1", "score": 0.6}, {"doc_id": "d2", "score": 0.2}]
        assert make_judge("score", threshold=0.5).count(hits) == 1
        assert make_judge("cited").count(hits, answer={"citations": ["d2", "d9"]}) == 1
