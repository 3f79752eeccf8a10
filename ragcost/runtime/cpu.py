"""CPU charged to the work that used it: per-thread CPU time, one stage call at a time per process.

``time.process_time()`` around a stage call counts every thread of the process: a second session
querying at the same moment, or an application thread doing its own numpy work, was billed to the
call. Here a call is charged the CPU of the threads doing its work, **added up**:

- **the calling thread**, from the kernel's thread clock (``CLOCK_THREAD_CPUTIME_ID``, exact);
- **the library pools it drives**: threads with no Python ``threading`` object (torch/OpenMP,
  onnxruntime, tokenizers, DuckDB workers are native), and Python threads a stage started (its
  own executor), each read from ``/proc`` before and after the call;
- **threads that exited during the call** (a per-call executor): the process's CPU over the call
  (``CLOCK_PROCESS_CPUTIME_ID``, which keeps an exited thread's CPU) minus every live thread's,
  counted only when positive.

Another Python thread -- another session's, an application's own -- is never added. The sum is
kept between the calling thread's CPU and the process's CPU over the call.

**numpy's BLAS pool** is native too, but shared with the application: while a foreign Python
thread is alive, a call pins BLAS to one thread and leaves the pool's workers out
(:mod:`ragcost.runtime.blas`). Beside a thread making threaded products, a query was charged
1.83-2.22x its CPU alone without that, 1.02-1.13x with it (``python -m bench.cost_attribution
--parts b``, ``--no-blas-pin`` for the control).

Why added up and not "the process minus the others" (the first version): the per-thread readings
take time. With many threads (a long test run leaves hundreds) the ``/proc`` scan after a call
took long enough, competing for the GIL with a foreign thread that burned all the while, that the
foreign thread's measured CPU exceeded the process's over the call, and the call was charged 0.
Added up, a slow scan can only add a little idle pool time; it can no longer take away the
calling thread's own CPU (``tests/runtime/test_cpu.py`` simulates the slow scan).

Pool threads are shared by every caller in the process, so stage calls are **serialised** by one
process-wide lock (:data:`METER`): while a call runs, the pools work for it alone. Sessions in one
process still overlap outside stage calls (parsing, ledger writes, HTTP).

**Which per-thread clock.** ``/proc/self/task/<tid>/schedstat`` (nanoseconds the scheduler ran the
thread); where that is missing or reads zeros (a kernel with scheduler statistics off prints
``0 0 0``), ``/proc/self/task/<tid>/stat``'s utime + stime (clock ticks, 10 ms). A clock is used
only if it gives the calling thread's CPU as the kernel's thread clock does (:func:`agrees`).
Where neither does (not Linux), every call falls back to the process's CPU
(``time.process_time``), as before, and :attr:`CpuMeter.per_thread` is False.

**Overhead.** The CPU of ragcost's threads outside stage calls -- the threads that ran queries
(:meth:`CpuMeter.own_thread`), threads named ``ragcost-*``, the pools idling or spinning between
calls -- is what :meth:`CpuMeter.claim_overhead` returns since the previous claim; the caller
charges it to its queries as an ``overhead`` row, so a run's charged CPU equals its threads' CPU.
Python threads that are none of these (an application's own) are foreign and never charged; in a
process that is ragcost's alone (``ragcost serve``), :meth:`CpuMeter.whole_process` counts them too.
CPU spent before :meth:`CpuMeter.baseline` (imports, loading models) is not a query's.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator, Optional, Sequence

from ragcost.runtime.blas import POOL, BlasPool

_TASK = "/proc/self/task"
_TICK_NS = 1_000_000_000 // (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)

Reader = Callable[[], "dict[int, int]"]


def _read_all(name: str, parse: Callable[[bytes], int]) -> dict[int, int]:
    out: dict[int, int] = {}
    try:
        tids = os.listdir(_TASK)
    except OSError:
        return out
    for tid in tids:
        try:
            fd = os.open(f"{_TASK}/{tid}/{name}", os.O_RDONLY)
            try:
                out[int(tid)] = parse(os.read(fd, 1024))
            finally:
                os.close(fd)
        except (OSError, ValueError, IndexError):
            pass  # the thread exited between the listing and the read
    return out


def schedstat_ns() -> dict[int, int]:
    """Nanoseconds of CPU per thread id, from ``schedstat`` (empty where /proc is not there)."""
    return _read_all("schedstat", lambda b: int(b.split(None, 1)[0]))


def _stat_ns(b: bytes) -> int:
    fields = b.rsplit(b")", 1)[1].split()  # the name in parentheses may hold spaces
    return (int(fields[11]) + int(fields[12])) * _TICK_NS  # utime + stime, fields 14 and 15 of stat


def stat_ns() -> dict[int, int]:
    """CPU per thread id from ``stat``'s utime + stime, in nanoseconds at clock-tick resolution."""
    return _read_all("stat", _stat_ns)


READERS: tuple[tuple[str, Reader], ...] = (("schedstat", schedstat_ns), ("stat", stat_ns))

_PROBE_NS = 60_000_000  # the calling thread must have used this much CPU for the check to mean anything
_SLACK_NS = 25_000_000  # schedstat lags a running thread by up to a tick; stat rounds down to ticks


def agrees(read: Reader) -> bool:
    """Does ``read`` give this thread's CPU as the kernel's thread clock does?

    Rejects a clock with no file for this thread, one that reads zeros, and one that reads
    something else (the whole process's CPU, another unit). Burns up to 60 ms of this thread's CPU
    first if it has used less (once per process: the check needs a reading far from zero).
    """
    me = threading.get_native_id()
    end = time.perf_counter() + 1.0
    while time.thread_time_ns() < _PROBE_NS and time.perf_counter() < end:
        sum(i * i for i in range(1000))
    a = time.thread_time_ns()
    got = read().get(me)
    b = time.thread_time_ns()
    if got is None:
        return False
    slack = max(_SLACK_NS, b // 10)
    return a - slack <= got <= b + slack


def _python_threads() -> dict[int, threading.Thread]:
    return {t.native_id: t for t in threading.enumerate() if t.native_id is not None}


class CallCpu:
    """What one measured call used; ``seconds`` is set when the call ends."""

    seconds: float = 0.0


class CpuMeter:
    """Process-wide: measures stage calls one at a time and keeps the CPU outside them for overhead.

    ``readers``: per-thread clocks to try, in order (name, function); the first that
    :func:`agrees` is used, chosen at first use.
    """

    def __init__(self, readers: Sequence[tuple[str, Reader]] = READERS, blas: Optional[BlasPool] = None) -> None:
        self.blas = blas if blas is not None else POOL
        self._readers = tuple(readers)
        self._read: Optional[Reader] = None
        self.clock: Optional[str] = None  # the name of the per-thread clock in use (None: process CPU)
        self._chosen = False
        self._call_lock = threading.RLock()  # serialises stage calls: the pools work for one call at a time
        self._mu = threading.Lock()
        self._owners: set[int] = set()  # Python threads that ran queries or were started inside a stage call
        self._spawned: set[int] = set()  # Python threads started inside a stage call: a stage's own
        self._whole = False
        self._last: dict[int, int] = {}  # thread -> CPU ns at the last claim or baseline
        self._last_process = time.process_time_ns()
        self._charged = 0.0  # stage-call CPU seconds since the last claim

    def _choose(self) -> None:
        if self._chosen:
            return
        with self._mu:
            if not self._chosen:
                for name, read in self._readers:
                    if agrees(read):
                        self._read, self.clock = read, name
                        break
                self._chosen = True

    @property
    def per_thread(self) -> bool:
        """Whether a per-thread clock is in use (else every call is charged the process's CPU)."""
        self._choose()
        return self._read is not None

    def thread_cpu_ns(self) -> dict[int, int]:
        """CPU nanoseconds per thread id from the clock in use (empty without one)."""
        self._choose()
        return self._read() if self._read is not None else {}

    def whole_process(self, on: bool = True) -> None:
        """Every thread of this process is ragcost's (``ragcost serve``): none is foreign."""
        self._whole = on

    def own_thread(self) -> None:
        """The calling thread runs queries: its CPU outside stage calls is overhead, not foreign."""
        with self._mu:
            self._owners.add(threading.get_native_id())

    def _counted(self, tid: int, pythons: dict[int, threading.Thread]) -> bool:
        t = pythons.get(tid)
        if t is None or self._whole or tid in self._owners:
            return True  # native pool threads; in a ragcost-only process, everything
        return t.name.startswith("ragcost")

    def _foreign(self, me: int, pythons: dict[int, threading.Thread]) -> bool:
        """Is a Python thread alive that is not ragcost's (an application's own)?"""
        return any(tid != me and not self._counted(tid, pythons) for tid in pythons)

    @contextmanager
    def call(self) -> Iterator[CallCpu]:
        """Measure one stage call (serialised with every other in the process)."""
        out = CallCpu()
        me = threading.get_native_id()
        self._choose()
        with self._mu:
            self._owners.add(me)  # a thread that makes stage calls runs queries: its other CPU is overhead
        with self._call_lock:
            exclude: set[int] = set()
            pin = nullcontext()
            if self._read is not None and self.blas.threaded() and self._foreign(me, _python_threads()):
                # an application thread may be using the BLAS pool: our products on our thread, theirs on theirs
                exclude = self.blas.find_workers(self._read, me, set(_python_threads()))
                pin = self.blas.pinned()
            with pin:
                before = self._read() if self._read is not None else {}
                # the process clock's window holds the thread clock's: process >= own by construction
                p0 = time.process_time_ns()
                t0 = time.thread_time_ns()
                try:
                    yield out
                finally:
                    own = time.thread_time_ns() - t0
                    process = time.process_time_ns() - p0  # every thread, those that exited during the call too
                    spent = process
                    if self._read is not None:
                        after = self._read()
                        spent = self._added_up(me, own, process, before, after, _python_threads(), exclude)
                    out.seconds = spent / 1e9
                    with self._mu:
                        self._charged += out.seconds

    def _added_up(self, me: int, own: int, process: int, before: dict[int, int], after: dict[int, int],
                  pythons: dict[int, threading.Thread], exclude: set[int] = frozenset()) -> int:
        """The call's CPU ns: the calling thread + its pools + exited threads, within [own, process].
        ``exclude``: native threads that did not work for the call (the BLAS pool while pinned)."""
        pool = others = 0
        for tid, ns in after.items():
            if tid == me:
                continue
            grew = max(ns - before.get(tid, 0), 0)  # a thread born during the call: all of its CPU
            if tid in pythons and tid not in before:
                with self._mu:  # started by the stage: its CPU now and later is ragcost's
                    self._owners.add(tid)
                    self._spawned.add(tid)
            if (tid not in pythons and tid not in exclude) or tid in self._spawned:
                pool += grew
            else:  # another Python thread, or the BLAS pool busy with one: not this call's work
                others += grew
        # What no live thread accounts for is the CPU of threads that exited during the call. The
        # readings' window is wider than the process clock's, so this errs low; never below 0.
        exited = max(process - own - pool - others, 0)
        return min(own + pool + exited, max(process, own))

    def baseline(self) -> None:
        """From now on: CPU before this (loading, imports) is no query's; unclaimed overhead is dropped."""
        self._choose()
        with self._mu:
            self._last, self._last_process = self._snapshot()
            self._charged = 0.0

    def _snapshot(self) -> tuple[dict[int, int], int]:
        """Every thread's CPU and the process's, the process clock read on both sides of the scan
        (a scan of many threads takes a while; a foreign thread burning meanwhile is read mid-scan)."""
        if self._read is None:
            return {}, time.process_time_ns()
        p0 = time.process_time_ns()
        now = self._read()
        return now, (p0 + time.process_time_ns()) // 2

    def claim_overhead(self) -> float:
        """CPU seconds of ragcost's threads since the last claim that no stage call was charged (>= 0)."""
        self._choose()
        with self._call_lock, self._mu:  # not while a call runs: its CPU would count here and in the call
            now, p = self._snapshot()
            used = p - self._last_process
            if now:
                pythons = _python_threads()
                # the BLAS pool outside calls works for an application thread when there is one
                blas = (self.blas.workers or set()) if self._foreign(-1, pythons) else set()
                used -= sum(max(ns - self._last.get(tid, 0), 0) for tid, ns in now.items()
                            if tid in blas or not self._counted(tid, pythons))
            self._last, self._last_process = now, p
            if now and blas:
                used += self.blas.probe_ns  # the BLAS probe ran for ragcost, on threads left out above
            self.blas.probe_ns = 0
            used_s = max(used, 0) / 1e9
            out = max(used_s - self._charged, 0.0)
            self._charged = 0.0
            return out


METER = CpuMeter()


def thread_cpu_ns() -> dict[int, int]:
    """CPU nanoseconds per thread id of this process, from the clock :data:`METER` uses."""
    return METER.thread_cpu_ns()
