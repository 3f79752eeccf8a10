"""CPU charged to the work that used it: the calling thread and the pools it drives, not the process's other threads."""

from __future__ import annotations

import threading
import time
from time import perf_counter, thread_time

import pytest

from ragcost.cost.pricebook import parse_price_book
from ragcost.records import QueryState, UsageRecord
from ragcost.runtime.cpu import METER
from ragcost.runtime.runner import Runner, overhead_call

BOOK = {"version": "t", "as_of": "2026-11-30", "queries_per_month": 1000,
        "resources": {"cpu": {"kind": "time", "usd_per_hour": 0.0857, "vcpus": 2, "source": "test"},
                      "gpu": {"kind": "time", "usd_per_hour": 3.6, "source": "test"}}}
pytestmark = pytest.mark.skipif(not METER.per_thread, reason="per-thread CPU needs /proc/self/task (Linux)")


@pytest.fixture
def book():
    return parse_price_book(BOOK, "book")


def burn(seconds: float) -> float:
    t0, end = thread_time(), perf_counter() + seconds
    while perf_counter() < end:
        sum(i * i for i in range(500))
    return thread_time() - t0


class Burn:
    name, resource, type = "burn", "cpu", "burn"

    def __init__(self, seconds: float, work=None, own=None) -> None:
        self.seconds, self.work, self.own, self.used = seconds, work, own, 0.0

    def run(self, batch, usage) -> None:
        self.used = burn(self.seconds)
        if self.work:
            usage.notes["work"] = self.work
        if self.own:
            for s in batch:
                s.usage.append(UsageRecord(stage="gen", resource="cpu", wall_seconds=0.2, items=1, calls=1,
                                           shared_by=len(batch), busy_share=1 / len(batch), call_id="p1"))


class TestTheCallsThreads:
    def test_a_foreign_thread_burning_beside_the_call_is_not_charged(self, book):
        stop = threading.Event()
        th = threading.Thread(target=lambda: [burn(0.01) for _ in iter(lambda: stop.is_set(), True)], daemon=True)
        th.start()
        try:
            stage = Burn(0.3)
            res = Runner([stage], book).run([QueryState(text="q", id="q1")])
        finally:
            stop.set()
            th.join()
        cpu = res.calls[0].record.cpu_seconds
        # The process used ~2x over the call (both threads ran); the call is charged its own thread's CPU.
        assert cpu == pytest.approx(stage.used, rel=0.15, abs=0.02)

    def test_cpu_outside_stage_calls_is_claimed_as_overhead_once(self, book):
        METER.own_thread()
        METER.baseline()
        used = burn(0.2)  # this thread's own work outside any stage call
        states = [QueryState(text="a", id="a"), QueryState(text="b", id="b")]
        over = overhead_call(states, "cpu", book)
        assert over.record.stage == "overhead" and over.record.calls == 0 and over.record.items == 2
        assert over.record.cpu_seconds == pytest.approx(used, rel=0.15, abs=0.02)
        assert overhead_call(states, "cpu", book).record.cpu_seconds < 0.05  # claimed: not charged twice


class TestPerQueryWork:
    def test_a_batch_call_is_split_by_what_each_query_made_it_do(self, book):
        states = [QueryState(text="a", id="a"), QueryState(text="b", id="b")]
        res = Runner([Burn(0.1, work={"a": 1, "b": 3})], book).run(states)
        a, b = res.calls
        assert (a.record.busy_share, b.record.busy_share) == (0.25, 0.75) and a.call_id == b.call_id
        assert a.record.cpu_seconds == b.record.cpu_seconds  # the call's CPU, once
        assert a.cost_usd + b.cost_usd == pytest.approx(a.record.cpu_seconds * 0.0857 / 3600 / 2, rel=1e-12)
        assert b.cost_usd == pytest.approx(3 * a.cost_usd, rel=1e-12)

    def test_records_a_stage_timed_itself_on_a_cpu_get_the_calls_cpu(self, book):
        states = [QueryState(text="a", id="a"), QueryState(text="b", id="b")]
        stage = Burn(0.1, own=True)
        res = Runner([stage], book).run(states)
        gen = [c for c in res.calls if c.record.stage == "gen"]
        assert len(gen) == 2 and all(c.record.cpu_seconds == pytest.approx(stage.used, rel=0.15, abs=0.02) for c in gen)
        # priced by CPU-seconds / vCPUs, not 0.2 s wall x the whole instance
        assert sum(c.cost_usd for c in gen) == pytest.approx(gen[0].record.cpu_seconds * 0.0857 / 3600 / 2, rel=1e-12)
