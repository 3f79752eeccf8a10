"""The one per-stage aggregation: calls (whole) and ledger rows (per-query shares)."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.cost.aggregate import by_stage_of_calls, by_stage_of_rows
from ragcost.records import UsageRecord


def _row(stage, call_id, items, wall, usd, calls=1, **kw):
    return {"stage": stage, "resource": "cpu", "call_id": call_id, "items": items, "calls": calls,
            "wall_seconds": wall, "cost_usd": usd, "retries": 0, "failures": 0,
            "input_tokens": None, "cached_input_tokens": None, "output_tokens": None, **kw}


class TestLedgerRows:
    def test_a_batch_call_is_one_latency_sample_and_its_counts_are_shared(self):
        rows = [_row("embed", "c1", 2, 0.4, 0.5, input_tokens=10), _row("embed", "c1", 2, 0.4, 0.5, input_tokens=10),
                _row("embed", "c2", 1, 0.2, 1.0, input_tokens=4)]
        agg = by_stage_of_rows(rows)["embed"]
        assert agg.walls == [0.4, 0.2] and agg.distinct_calls == 2
        assert agg.calls == pytest.approx(2.0) and agg.input_tokens == pytest.approx(14.0)
        assert agg.usd == pytest.approx(2.0)
        assert agg.latency() == tuple(np.percentile([0.4, 0.2], [50, 95, 99], method="linear"))

    def test_storage_rows_add_dollars_not_latency(self):
        agg = by_stage_of_rows([_row("storage", "s1", 1, 0.0, 0.25, calls=0)])["storage"]
        assert agg.walls == [] and agg.latency() == (None, None, None) and agg.usd == 0.25

    def test_unknown_cached_tokens_are_counted_not_zeroed(self):
        agg = by_stage_of_rows([_row("gen", "g", 1, 0.1, 0.0, input_tokens=5)])["gen"]
        assert agg.unknown_cached == 1 and agg.cached_input_tokens is None

    def test_stages_keep_first_seen_order(self):
        rows = [_row("b", "1", 1, 0.1, 0.0), _row("a", "2", 1, 0.1, 0.0), _row("b", "3", 1, 0.1, 0.0)]
        assert list(by_stage_of_rows(rows)) == ["b", "a"]


class TestCalls:
    def test_each_record_is_a_call_with_its_whole_counts(self):
        recs = [UsageRecord(stage="rerank", resource="gpu", wall_seconds=0.3, items=4, notes={"m": {"x": 1}}),
                UsageRecord(stage="rerank", resource="gpu", wall_seconds=0.1, items=2, notes={"m": {"x": 2}})]
        agg = by_stage_of_calls([(recs[0], 0.5), (recs[1], 0.25)])["rerank"]
        assert (agg.calls, agg.items, agg.usd, agg.walls) == (2, 6, 0.75, [0.3, 0.1])
        assert agg.notes == {"m": {"x": 3}} and agg.input_tokens is None

    def test_named_samples_come_only_from_calls_that_did_not_fail(self):
        ok = UsageRecord(stage="gen", resource="api", ttft_s=0.2)
        bad = UsageRecord(stage="gen", resource="api", failures=1, ttft_s=9.0)
        agg = by_stage_of_calls([(ok, 0.0), (bad, 0.0)], ("ttft_s",))["gen"]
        assert agg.samples["ttft_s"] == [0.2] and agg.failures == 1 and agg.entries == 2
        assert agg.sample_percentile("ttft_s", 50) == pytest.approx(0.2)
