"""Every dollar reconciles with a hand calculation; shared busy time is paid once."""

from __future__ import annotations

import pytest

from ragcost.cost.compute import (
    busy_period_cost, cost_of, share_of, stage_row, storage_cost_per_query, storage_row,
)
from ragcost.cost.aggregate import by_stage_of_calls
from ragcost.cost.ledger import Ledger
from ragcost.cost.report import build_report
from ragcost.records import UsageRecord as U
from ragcost.errors import ConfigError, StageError

GIB = 2**30


def fixture_run():
    """Three queries: one batch embed call, per-query retrieval, GPU generation, API calls with a retry and a failure."""
    embed = U("embed", "cpu", wall_seconds=0.5, items=3)  # one batch call for all three
    per_query = {
        "q1": [U("retrieve", "cpu", wall_seconds=0.01),
               U("generate", "gpu", wall_seconds=2.0),  # unmeasured sharing: the book's concurrency 4
               U("guard", "api", input_tokens=1000, cached_input_tokens=500, output_tokens=200)],
        "q2": [U("retrieve", "cpu", wall_seconds=0.02),
               U("generate", "gpu", wall_seconds=1.0, shared_by=2),  # measured: 2 streams shared it
               U("guard", "api", input_tokens=1000, cached_input_tokens=None, output_tokens=10, retries=1)],
        "q3": [U("retrieve", "cpu", wall_seconds=0.03),
               U("generate", "api-nocache", input_tokens=100, cached_input_tokens=50, output_tokens=0, failures=1)],
    }
    return embed, per_query


# The same dollars, written out by hand from the records and the book in conftest.py:
CPU_PER_S = 0.36 / 3600  # 1e-4 $/s
GPU_PER_S = 7.2 / 3600  # 2e-3 $/s
HAND = {
    "q1": {"embed": 0.5 * CPU_PER_S / 3, "retrieve": 0.01 * CPU_PER_S, "generate": 2.0 * GPU_PER_S / 4,
           "guard": (1000 * 1.0 + 500 * 0.5 + 200 * 2.0) / 1e6},
    "q2": {"embed": 0.5 * CPU_PER_S / 3, "retrieve": 0.02 * CPU_PER_S, "generate": 1.0 * GPU_PER_S / 2,
           "guard": (1000 * 1.0 + 10 * 2.0) / 1e6},  # cached unknown: nothing billed at the cached price
    "q3": {"embed": 0.5 * CPU_PER_S / 3, "retrieve": 0.03 * CPU_PER_S,
           "generate": (100 * 3.0 + 50 * 3.0) / 1e6},  # no cached price: cached bill as input
}
RAM, DISK = 1 * GIB, 10 * GIB
STORAGE_PER_QUERY = (1 * 2.0 + 10 * 0.1) / 1000  # GiB-months / queries_per_month
for q in HAND:
    HAND[q]["storage"] = STORAGE_PER_QUERY


class TestReconciliation:
    def test_every_record_matches_the_hand_calculation(self, book):
        embed, per_query = fixture_run()
        assert share_of(embed, book) == pytest.approx(HAND["q1"]["embed"], abs=1e-12)
        assert cost_of(embed, book) == pytest.approx(0.5 * CPU_PER_S, abs=1e-12)
        for q, recs in per_query.items():
            for r in recs:
                assert share_of(r, book) == pytest.approx(HAND[q][r.stage], abs=1e-12), (q, r.stage)
        assert storage_cost_per_query(RAM, DISK, book) == pytest.approx(STORAGE_PER_QUERY, abs=1e-15)

    def test_ledger_and_report_reconcile_to_1e_9(self, book, tmp_path):
        embed, per_query = fixture_run()
        led = Ledger(f"duckdb:///{tmp_path}/l.duckdb")
        run = led.start_run("eval", "fixture", book.version, {})
        for q, recs in per_query.items():
            rows = [stage_row(embed, book, call_id="embed-batch-1")] + [stage_row(r, book) for r in recs]
            rows.append(storage_row(RAM, DISK, book))
            led.record_query(run, {"query_id": q, "ok": q != "q3", "useful": 1}, rows)
        led.finish_run(run)
        rep = build_report(led)
        led.close()

        hand_total = sum(sum(v.values()) for v in HAND.values())
        assert abs(rep.totals.usd - hand_total) < 1e-9
        per_stage = {s: sum(HAND[q].get(s, 0.0) for q in HAND) for s in ("embed", "retrieve", "generate", "guard", "storage")}
        got = {r.stage: r.usd for r in rep.stages}
        assert got.keys() == per_stage.keys()
        for s in per_stage:
            assert abs(got[s] - per_stage[s]) < 1e-9, s
        assert abs(sum(r.usd for r in rep.stages) - rep.totals.usd) < 1e-12
        assert abs(rep.totals.usd_per_successful - hand_total / 2) < 1e-9
        assert abs(rep.totals.usd_per_useful - hand_total / 3) < 1e-9
        embed_row = next(r for r in rep.stages if r.stage == "embed")
        assert embed_row.calls == 1 and embed_row.calls_per_query == pytest.approx(1 / 3)

    def test_per_stage_aggregation_sums_to_total(self, book):
        embed, per_query = fixture_run()
        recs = [embed] + [r for rs in per_query.values() for r in rs]
        stages = by_stage_of_calls((r, cost_of(r, book)) for r in recs)
        assert sum(s.usd for s in stages.values()) == pytest.approx(sum(cost_of(r, book) for r in recs), abs=1e-15)
        assert stages["guard"].unknown_cached == 1


class TestSharedBusyPeriod:
    def test_two_concurrent_requests_pay_the_period_once(self, book):
        a = U("generate", "cpu", wall_seconds=1.0, shared_by=2)
        b = U("generate", "cpu", wall_seconds=1.0, shared_by=2)
        period = busy_period_cost(a, book)
        assert period == pytest.approx(CPU_PER_S)
        assert cost_of(a, book) + cost_of(b, book) == pytest.approx(period, abs=1e-15)

    def test_a_batch_of_two_pays_the_period_once(self, book):
        batch = U("rerank", "cpu", wall_seconds=1.0, items=2)
        assert cost_of(batch, book) == pytest.approx(CPU_PER_S, abs=1e-15)
        assert 2 * share_of(batch, book) == pytest.approx(CPU_PER_S, abs=1e-15)

    def test_book_concurrency_divides_when_sharing_is_not_measured(self, book):
        calls = [U("generate", "gpu", wall_seconds=1.0) for _ in range(4)]  # gpu: concurrency 4
        assert sum(cost_of(c, book) for c in calls) == pytest.approx(GPU_PER_S, abs=1e-15)

    def test_measured_sharing_wins_over_book_concurrency(self, book):
        a = U("generate", "gpu", wall_seconds=1.0, shared_by=1)
        assert cost_of(a, book) == pytest.approx(GPU_PER_S, abs=1e-15)

    def test_shared_by_below_items_is_refused(self, book):
        with pytest.raises(StageError, match="stage 'rerank'.*shared_by"):
            cost_of(U("rerank", "cpu", wall_seconds=1.0, items=4, shared_by=2), book)


class TestPrices:
    def test_unknown_resource_names_the_stage(self, book):
        with pytest.raises(ConfigError, match="stage 'embed': unknown resource 'tpu'.*add it to the price book"):
            cost_of(U("embed", "tpu", wall_seconds=1.0), book)

    def test_storage_resource_is_not_a_call_price(self, book):
        with pytest.raises(ConfigError, match="storage price"):
            cost_of(U("embed", "storage", wall_seconds=1.0), book)

    def test_index_size_shows_in_dollars_per_query(self, book):
        small, big = storage_cost_per_query(384 * 4 * 10**6, 0, book), storage_cost_per_query(1024 * 4 * 10**6, 0, book)
        assert big / small == pytest.approx(1024 / 384)

    def test_failed_call_tokens_are_billed(self, book):
        assert cost_of(U("generate", "api", input_tokens=10**6, failures=1), book) == pytest.approx(1.0)
