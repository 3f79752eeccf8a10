"""CPU charged to the work that used it: per-thread CPU time, one stage call at a time per process.

``time.process_time()`` around a stage call counts every thread of the process: a second session
querying at the same moment, or an application thread doing its own numpy work, was billed to the
call. Here a call is charged the CPU of the threads doing its work:

- **the calling thread**, and
- **the library pools it drives**: threads with no Python ``threading`` object (torch/OpenMP,
  onnxruntime, tokenizers and BLAS workers are native), plus Python threads started while a stage
  call ran (a stage's own executor).

It is measured by subtraction: the process's CPU over the call (``CLOCK_PROCESS_CPUTIME_ID``,
which keeps the CPU of threads that exited meanwhile) minus that of every other Python thread
alive across the call -- another session's thread, an application's own.

Pool threads are shared by every caller in the process, so stage calls are **serialised** by one
process-wide lock (:data:`METER`): while a call runs, the pools work for it alone. Sessions in one
process still overlap outside stage calls (parsing, ledger writes, HTTP).

CPU is read per thread from ``/proc/self/task/<tid>/schedstat`` (nanoseconds the scheduler ran
the thread; no tick rounding). Where that is missing (not Linux) every call falls back to the
process's CPU (``time.process_time``), as before, and :attr:`CpuMeter.per_thread` is False.

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
from contextlib import contextmanager
from typing import Iterator, Optional

_TASK = "/proc/self/task"


def thread_cpu_ns() -> dict[int, int]:
    """Nanoseconds of CPU per thread id of this process (empty where /proc is not there)."""
    out: dict[int, int] = {}
    try:
        tids = os.listdir(_TASK)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{_TASK}/{tid}/schedstat", "rb") as f:
                out[int(tid)] = int(f.read().split(None, 1)[0])
        except (OSError, ValueError, IndexError):
            pass  # the thread exited between the listing and the read
    return out


def _python_threads() -> dict[int, threading.Thread]:
    return {t.native_id: t for t in threading.enumerate() if t.native_id is not None}


class CallCpu:
    """What one measured call used; ``seconds`` is set when the call ends."""

    seconds: float = 0.0


class CpuMeter:
    """Process-wide: measures stage calls one at a time and keeps the CPU outside them for overhead."""

    def __init__(self) -> None:
        self.per_thread = bool(thread_cpu_ns())
        self._call_lock = threading.RLock()  # serialises stage calls: the pools work for one call at a time
        self._mu = threading.Lock()
        self._owners: set[int] = set()  # Python threads that ran queries or were started inside a stage call
        self._whole = False
        self._last: dict[int, int] = {}  # thread -> CPU ns at the last claim or baseline
        self._last_process = time.process_time_ns()
        self._charged = 0.0  # stage-call CPU seconds since the last claim

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

    @contextmanager
    def call(self) -> Iterator[CallCpu]:
        """Measure one stage call (serialised with every other in the process)."""
        out = CallCpu()
        me = threading.get_native_id()
        with self._mu:
            self._owners.add(me)  # a thread that makes stage calls runs queries: its other CPU is overhead
        with self._call_lock:
            before = thread_cpu_ns() if self.per_thread else {}
            p0 = time.process_time_ns()
            try:
                yield out
            finally:
                spent = time.process_time_ns() - p0  # every thread, those that exited during the call too
                if self.per_thread:
                    after = thread_cpu_ns()
                    pythons = _python_threads()
                    for tid, ns in after.items():
                        if tid in pythons and tid != me:
                            if tid in before:  # another Python thread, there all along: not this call's work
                                spent -= ns - before[tid]
                            else:  # started by the stage: its CPU now and later is ragcost's
                                with self._mu:
                                    self._owners.add(tid)
                out.seconds = max(spent, 0) / 1e9
                with self._mu:
                    self._charged += out.seconds

    def baseline(self) -> None:
        """From now on: CPU before this (loading, imports) is no query's; unclaimed overhead is dropped."""
        with self._mu:
            self._last = thread_cpu_ns()
            self._last_process = time.process_time_ns()
            self._charged = 0.0

    def claim_overhead(self) -> float:
        """CPU seconds of ragcost's threads since the last claim that no stage call was charged (>= 0)."""
        with self._call_lock, self._mu:  # not while a call runs: its CPU would count here and in the call
            p = time.process_time_ns()
            used = p - self._last_process
            now = thread_cpu_ns() if self.per_thread else {}
            if now:
                pythons = _python_threads()
                used -= sum(ns - self._last.get(tid, 0) for tid, ns in now.items() if not self._counted(tid, pythons))
            self._last, self._last_process = now, p
            used_s = max(used, 0) / 1e9
            out = max(used_s - self._charged, 0.0)
            self._charged = 0.0
            return out


METER = CpuMeter()


def overhead_seconds(meter: Optional[CpuMeter] = None) -> float:
    return (meter or METER).claim_overhead()
