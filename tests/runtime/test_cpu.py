"""CPU charged to the work that used it: the calling thread and the pools it drives, not the process's other threads."""

from __future__ import annotations

import threading
import time
from time import perf_counter, thread_time

import pytest

from ragcost.cost.pricebook import parse_price_book
from ragcost.records import QueryState, UsageRecord
from ragcost.runtime.blas import BlasPool
from ragcost.runtime.cpu import METER, CpuMeter, _python_threads, agrees, schedstat_ns, stat_ns
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

    def __init__(self, seconds: float, work=None, own=None, tokens=None) -> None:
        self.seconds, self.work, self.own, self.tokens, self.used = seconds, work, own, tokens, 0.0

    def run(self, batch, usage) -> None:
        self.used = burn(self.seconds)
        if self.work:
            usage.work = self.work
        if self.tokens:
            usage.query_tokens = self.tokens
            usage.input_tokens = sum(self.tokens.values())
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


def foreign_burner():
    """A foreign Python thread burning pure Python until the returned stop() is called."""
    stop = threading.Event()
    th = threading.Thread(target=lambda: [burn(0.01) for _ in iter(lambda: stop.is_set(), True)], daemon=True)
    th.start()

    def done() -> None:
        stop.set()
        th.join()
    return done


def charged_beside_a_burner(meter, seconds: float = 0.3) -> tuple[float, float]:
    """(CPU the meter charged a call, CPU the call's thread used) while a foreign thread burns beside it."""
    done = foreign_burner()
    try:
        with meter.call() as c:
            used = burn(seconds)
    finally:
        done()
    return c.seconds, used


class TestTheReadingsCannotTakeTheCallsOwnCpuAway:
    """CI (a 2-core box, the whole suite in one process) charged this call 0.0: with hundreds of
    threads alive the /proc scan after the call took long, the foreign thread burned all the while,
    and "the process minus the others" went below 0. A call is now its threads' CPU added up."""

    def test_a_slow_scan_beside_a_burning_foreign_thread(self):
        def slow_scan():  # what hundreds of threads and a GIL-holding burner did to the scan in CI
            out = schedstat_ns()
            time.sleep(0.2)  # the GIL is free: the foreign thread burns on, inside its own readings' window
            return out

        meter = CpuMeter(readers=[("slow", slow_scan)])
        charged, used = charged_beside_a_burner(meter)
        assert meter.clock == "slow"
        assert charged == pytest.approx(used, rel=0.15, abs=0.02)

    def test_a_clock_that_reads_zeros_is_refused_for_the_next(self):
        # schedstat with the kernel's scheduler statistics off prints "0 0 0" for every thread
        meter = CpuMeter(readers=[("zeros", lambda: dict.fromkeys(schedstat_ns(), 0)), ("stat", stat_ns)])
        assert meter.per_thread and meter.clock == "stat"
        charged, used = charged_beside_a_burner(meter)
        assert charged == pytest.approx(used, rel=0.15, abs=0.03)  # stat: 10 ms ticks

    def test_a_clock_that_reads_the_whole_process_is_refused(self):
        done = foreign_burner()  # other threads' CPU, so the process's differs from this thread's
        time.sleep(0.3)
        done()
        whole = lambda: dict.fromkeys(schedstat_ns(), time.process_time_ns())  # noqa: E731
        verdicts = {}

        def probe() -> None:
            # in a thread of its own, as a meter probes: its CPU starts near zero, so the check's slack (a tenth of
            # the thread's CPU) stays far below the process's. A long-lived test worker's main thread can hold
            # nearly all of the process's CPU, and there a process clock is within that tenth.
            verdicts["own"] = time.process_time() - thread_time()
            verdicts["whole"], verdicts["schedstat"] = agrees(whole), agrees(schedstat_ns)

        t = threading.Thread(target=probe)
        t.start()
        t.join()
        assert verdicts["own"] > 0.05
        assert not verdicts["whole"] and verdicts["schedstat"]

    def test_no_per_thread_clock_falls_back_to_the_process_cpu(self):
        meter = CpuMeter(readers=[("missing", dict)])
        assert not meter.per_thread and meter.clock is None
        p0 = time.process_time()
        with meter.call() as c:
            used = burn(0.1)
        assert used - 0.01 <= c.seconds <= time.process_time() - p0 + 1e-6

    @pytest.mark.parametrize("case, before, after, process, want", [
        # a foreign thread (tid 2) read as having burned more than the process did over the call
        ("slow scan", {2: 0, 3: 0}, {2: 900, 3: 40}, 500, 340),
        # a pool thread that exited: what no live thread accounts for is the call's
        ("exited", {2: 0}, {2: 100}, 600, 500),
        # readings that make no sense: never more than the process used over the call
        ("inflated pool", {3: 0}, {3: 10_000}, 700, 700),
    ])
    def test_the_sum_is_kept_between_the_threads_own_and_the_process(self, case, before, after, process, want):
        main = threading.get_native_id()
        pythons = {main: threading.current_thread(), 2: threading.Thread()}  # 3 is native: a pool
        got = CpuMeter(readers=[])._added_up(main, 300, process, {main: 0, **before}, {main: 300, **after}, pythons)
        assert got == want, case


def products(stop: threading.Event, size: int) -> None:
    import numpy as np

    x = np.full((size, size), 0.5)
    while not stop.is_set():
        x = (x @ x.T) / size


@pytest.mark.skipif(not BlasPool().threaded(), reason="numpy's BLAS runs one thread here: no pool to share")
class TestTheBlasPool:
    """OpenBLAS's workers are native threads shared with the application: a foreign thread's
    threaded products (and the pool's spin after each) were charged to the stage call in flight."""

    def test_a_foreign_threads_products_are_not_the_calls(self):
        meter = CpuMeter(blas=BlasPool())
        me = threading.get_native_id()
        assert meter.blas.find_workers(meter.thread_cpu_ns, me, set(_python_threads()))  # the probe sees the pool
        stop = threading.Event()
        th = threading.Thread(target=products, args=(stop, 256), daemon=True)
        th.start()
        try:
            with meter.call() as c:
                assert [ctl.num_threads for ctl in meter.blas.controllers()] == [1] * len(meter.blas.controllers())
                used = burn(0.3)
        finally:
            stop.set()
            th.join()
        assert meter.blas.threaded()  # restored after the call
        assert c.seconds == pytest.approx(used, rel=0.15, abs=0.02)

    def test_with_no_foreign_thread_blas_stays_threaded_and_is_the_calls(self):
        import numpy as np

        meter = CpuMeter(blas=BlasPool())
        assert not meter._foreign(threading.get_native_id(), {threading.get_native_id(): threading.current_thread()})
        x = np.full((256, 256), 0.5)
        meter.own_thread()
        if meter._foreign(threading.get_native_id(), _python_threads()):
            pytest.skip("a thread left by another test is alive: calls pin here")
        with meter.call() as c:
            t0 = thread_time()
            for _ in range(40):
                x @ x
            own = thread_time() - t0
        assert meter.blas.workers is None  # never probed: nothing to share with
        assert c.seconds > own  # the pool's CPU (and spin) is the call's


class TestPerQueryWork:
    def test_a_batch_call_is_split_by_what_each_query_made_it_do(self, book):
        states = [QueryState(text="a", id="a"), QueryState(text="b", id="b")]
        res = Runner([Burn(0.1, work={"a": 1, "b": 3})], book).run(states)
        a, b = res.calls
        assert (a.record.busy_share, b.record.busy_share) == (0.25, 0.75) and a.call_id == b.call_id
        assert a.record.cpu_seconds == b.record.cpu_seconds  # the call's CPU, once
        assert a.cost_usd + b.cost_usd == pytest.approx(a.record.cpu_seconds * 0.0857 / 3600 / 2, rel=1e-12)
        assert b.cost_usd == pytest.approx(3 * a.cost_usd, rel=1e-12)

    def test_a_split_embed_puts_each_querys_own_tokens_on_its_row(self, book):
        states = [QueryState(text="a", id="a"), QueryState(text="b", id="b")]
        res = Runner([Burn(0.05, work={"a": 60, "b": 100}, tokens={"a": 5, "b": 45})], book).run(states)
        a, b = res.calls
        assert (a.record.input_tokens, b.record.input_tokens) == (5, 45)  # not the batch's 50 on each
        assert (a.record.busy_share, b.record.busy_share) == (60 / 160, 100 / 160)
        assert a.record.query_tokens is None and a.record.work == {"a": 60}  # no batch-wide map on every row

    def test_records_a_stage_timed_itself_on_a_cpu_get_the_calls_cpu(self, book):
        states = [QueryState(text="a", id="a"), QueryState(text="b", id="b")]
        stage = Burn(0.1, own=True)
        res = Runner([stage], book).run(states)
        gen = [c for c in res.calls if c.record.stage == "gen"]
        assert len(gen) == 2 and all(c.record.cpu_seconds == pytest.approx(stage.used, rel=0.15, abs=0.02) for c in gen)
        # priced by CPU-seconds / vCPUs, not 0.2 s wall x the whole instance
        assert sum(c.cost_usd for c in gen) == pytest.approx(gen[0].record.cpu_seconds * 0.0857 / 3600 / 2, rel=1e-12)
