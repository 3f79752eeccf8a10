"""CPU stages pay the CPU time they consumed (/ the instance's vCPUs), not the wall time a loaded host stretched."""

from __future__ import annotations

import hashlib
import os
import threading
from time import perf_counter, thread_time

import pytest

from ragcost.cost.compute import cost_of, share_of, stage_row
from ragcost.cost.pricebook import parse_price_book
from ragcost.records import UsageRecord as U
from ragcost.runtime.runner import Runner
from ragcost.records import QueryState

BOOK = {
    "version": "cpu-test.1", "as_of": "2026-11-30", "queries_per_month": 1000,
    "resources": {
        "cpu2": {"kind": "time", "usd_per_hour": 0.0857, "vcpus": 2, "source": "test"},
        "gpu": {"kind": "time", "usd_per_hour": 7.2, "concurrency": 4, "source": "test"},
    },
}
PER_CPU_S = 0.0857 / 3600 / 2  # $ per CPU-second on the 2-vCPU instance


@pytest.fixture
def book():
    return parse_price_book(BOOK, "test-book")


class TestTheCpuRule:
    def test_an_embed_on_a_loaded_host_costs_what_it_costs_on_an_idle_one(self, book):
        idle = U("embed", "cpu2", wall_seconds=0.068, cpu_seconds=0.120)
        loaded = U("embed", "cpu2", wall_seconds=0.700, cpu_seconds=0.120)  # waited for the CPU, used no more of it
        assert cost_of(idle, book) == cost_of(loaded, book) == pytest.approx(0.120 * PER_CPU_S, rel=1e-15)

    def test_two_threads_for_one_second_pay_two_cpu_seconds(self, book):
        rec = U("rerank", "cpu2", wall_seconds=1.0, cpu_seconds=2.0)
        assert cost_of(rec, book) == pytest.approx(2.0 * PER_CPU_S, rel=1e-15)
        assert cost_of(rec, book) == pytest.approx(0.0857 / 3600, rel=1e-15)  # both vCPUs for a second: the hourly rate

    def test_a_batch_call_splits_its_cpu_time_over_its_queries(self, book):
        rec = U("embed", "cpu2", wall_seconds=0.5, cpu_seconds=0.9, items=3)
        assert share_of(rec, book) == pytest.approx(0.9 * PER_CPU_S / 3, rel=1e-15)
        assert cost_of(rec, book) == pytest.approx(0.9 * PER_CPU_S, rel=1e-15)
        row = stage_row(rec, book)
        assert (row["cpu_seconds"], row["shared_by"], row["cost_usd"]) == (0.9, 3, share_of(rec, book))

    def test_without_measured_cpu_time_the_wall_time_is_charged(self, book):
        rec = U("embed", "cpu2", wall_seconds=0.068)  # built by hand: cpu_seconds None
        assert cost_of(rec, book) == pytest.approx(0.068 * 0.0857 / 3600, rel=1e-15)  # the whole instance, busy

    def test_a_gpu_is_still_priced_by_busy_wall_time(self, book):
        rec = U("generate", "gpu", wall_seconds=2.0, cpu_seconds=0.01, shared_by=2)
        assert cost_of(rec, book) == pytest.approx(2.0 * 7.2 / 3600 / 2, rel=1e-15)

    def test_a_busy_share_pays_that_part_of_the_period(self, book):
        short = U("generate", "gpu", wall_seconds=0.0918, busy_share=0.0038 / 0.0918, shared_by=2, call_id="p")
        long = U("generate", "gpu", wall_seconds=0.0918, busy_share=0.088 / 0.0918, shared_by=2, call_id="p")
        period = 0.0918 * 7.2 / 3600
        assert cost_of(short, book) == pytest.approx(period * 0.0038 / 0.0918, rel=1e-12)
        assert cost_of(short, book) + cost_of(long, book) == pytest.approx(period, rel=1e-12)  # paid once, by duration
        assert stage_row(long, book)["busy_share"] == long.busy_share

    @pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
    def test_a_busy_share_outside_0_1_is_refused(self, book, bad):
        with pytest.raises(Exception, match="busy_share=.*within \\[0, 1\\]"):
            cost_of(U("generate", "gpu", wall_seconds=1.0, busy_share=bad), book)


class _Spin:
    """A CPU-bound stage: ``threads`` threads each hash for ``seconds`` of wall time (hashlib releases
    the GIL, so the threads run in parallel where cores are free); each thread's own CPU time is kept."""

    name = type = "spin"
    resource = "cpu2"

    def __init__(self, threads: int, seconds: float) -> None:
        self.threads, self.seconds = threads, seconds
        self.thread_cpu: list[float] = []

    def run(self, batch, usage) -> None:
        block = b"x" * (1 << 20)

        def burn() -> None:
            t0, end = thread_time(), perf_counter() + self.seconds
            while perf_counter() < end:
                hashlib.sha256(block).digest()
            self.thread_cpu.append(thread_time() - t0)

        ts = [threading.Thread(target=burn) for _ in range(self.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


class TestTheRunnerMeasures:
    def test_cpu_seconds_are_positive_and_at_most_wall_times_cores(self, book):
        res = Runner([_Spin(1, 0.2)], book).run([QueryState(text="q", id="q1")])
        [call] = res.calls
        rec = call.record
        cores = os.cpu_count() or 1
        assert 0 < rec.cpu_seconds <= rec.wall_seconds * cores + 0.01
        assert call.cost_usd == pytest.approx(rec.cpu_seconds * PER_CPU_S, rel=1e-12)

    def test_the_runner_counts_every_thread_of_the_process(self, book):
        spin = _Spin(2, 0.3)
        res = Runner([spin], book).run([QueryState(text="q", id="q1")])
        measured = res.calls[0].record.cpu_seconds
        # Process CPU time covers both threads: never less than what the two consumed between them.
        assert len(spin.thread_cpu) == 2 and measured >= sum(spin.thread_cpu) - 1e-3
        assert measured > max(spin.thread_cpu)


class TestTheLedgerKeepsIt:
    def test_an_older_ledger_gains_the_columns_and_rows_keep_cpu_time_and_shares(self, book, tmp_path):
        import duckdb

        from ragcost.cost.ledger import Ledger

        path = tmp_path / "old.duckdb"
        con = duckdb.connect(str(path))  # a ledger written before cpu_seconds / busy_share / tokens_estimated
        con.execute("CREATE TABLE rc_ledger_stage_calls (id VARCHAR PRIMARY KEY, query_id VARCHAR, run_id VARCHAR, "
                    "call_id VARCHAR, stage VARCHAR, resource VARCHAR, wall_seconds DOUBLE, items INTEGER, shared_by INTEGER, "
                    "calls INTEGER, retries INTEGER, failures INTEGER, bytes BIGINT, cost_usd DOUBLE)")
        con.execute("INSERT INTO rc_ledger_stage_calls VALUES ('old', 'q0', 'r0', 'c0', 'embed', 'cpu', 0.5, 1, 1, 1, 0, 0, 0, 1e-6)")
        con.close()
        with Ledger(f"duckdb:///{path}") as led:
            run = led.start_run("query", "p", "v")
            rows = [stage_row(U("embed", "cpu2", wall_seconds=0.7, cpu_seconds=0.12), book),
                    stage_row(U("generate", "gpu", wall_seconds=0.09, busy_share=0.25, tokens_estimated=True), book)]
            led.record_query(run, {"query_id": "q1"}, rows)
            with led.engine.connect() as conn:
                import sqlalchemy as sa

                old = conn.execute(sa.text("SELECT cpu_seconds, busy_share FROM rc_ledger_stage_calls WHERE id = 'old'")).one()
            _, got = led.read()
        assert tuple(old) == (None, None)  # older rows read NULL: not measured
        embed, gen = sorted(got, key=lambda r: r["seq"])
        assert (embed["cpu_seconds"], embed["busy_share"], embed["tokens_estimated"]) == (0.12, None, False)
        assert (gen["cpu_seconds"], gen["busy_share"], gen["tokens_estimated"]) == (None, 0.25, True)
        assert embed["cost_usd"] == pytest.approx(0.12 * PER_CPU_S, rel=1e-15)
