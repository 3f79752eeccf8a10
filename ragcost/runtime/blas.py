"""numpy's BLAS pool inside stage calls: the work runs on the thread that asks for it.

OpenBLAS's workers are native threads started when numpy loads, shared by every thread of the
process. An application thread's matrix product runs on them; so does the spin (about 0.1 s a
worker) after each threaded product. Left alone, that CPU lands on whichever stage call is in
flight: to the meter a native thread is a pool the call drives.

So while a foreign Python thread is alive (:meth:`ragcost.runtime.cpu.CpuMeter.call`), a stage
call **pins BLAS to one thread** (threadpoolctl, restored after the call): ragcost's own products
run on the calling thread, and so do the foreign thread's products made meanwhile, on its own
thread. The workers' CPU then is never the call's, and the meter leaves them out.

The workers are found once, the first time a call pins, by a probe: native threads that stay
still for 10 ms and then advance during 30 ms of threaded products on the calling thread (it
waits out their spin after, up to 0.5 s; their CPU in it goes to the ``overhead`` row). A
foreign thread already making threaded products during the probe hides them (they are counted
as a pool then, as before this module). No numpy, no threadpoolctl, or one BLAS thread: nothing
to do.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

_QUIET_S, _PROBE_S = 0.01, 0.03
_MOVED_NS = 2_000_000  # a worker that took part in the probe's products ran at least this long
_SPIN_WAIT_S = 0.5


class BlasPool:
    def __init__(self) -> None:
        self._controllers: Optional[list] = None
        self.workers: Optional[set[int]] = None  # native thread ids of the BLAS pool (None: not probed)
        self.probe_ns = 0  # the workers' CPU in the probe: ragcost's own, claimed as overhead

    def controllers(self) -> list:
        """threadpoolctl's BLAS controllers, looked up once numpy is loaded ([] without it)."""
        if self._controllers is None:
            if "numpy" not in sys.modules:
                return []  # not yet: numpy may load later
            try:
                from threadpoolctl import ThreadpoolController

                self._controllers = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
            except Exception:  # threadpoolctl missing or unable to read a library: leave BLAS alone
                self._controllers = []
        return self._controllers

    def threaded(self) -> bool:
        return any(c.num_threads > 1 for c in self.controllers())

    def find_workers(self, read: Callable[[], dict[int, int]], me: int, pythons: set[int]) -> set[int]:
        """The BLAS pool's native threads, by the probe (once; ``read`` is the meter's clock)."""
        if self.workers is not None:
            return self.workers
        self.workers = set()
        if not self.threaded():
            return self.workers
        import numpy as np

        x = np.full((256, 256), 0.5)  # above OpenBLAS's threading threshold
        r0 = read()
        time.sleep(_QUIET_S)
        r1 = read()
        end = time.perf_counter() + _PROBE_S
        while time.perf_counter() < end:
            x @ x
        r2 = read()
        moved = {t for t, ns in r2.items() if t != me and t not in pythons
                 and ns - r1.get(t, ns) >= _MOVED_NS and r1.get(t, 0) - r0.get(t, 0) < _MOVED_NS // 2}
        # the workers spin a while after the last product: wait that out, so the probe's CPU is known
        end, last = time.perf_counter() + _SPIN_WAIT_S, r2
        while moved and time.perf_counter() < end:
            time.sleep(0.02)
            now = read()
            if all(now.get(t, 0) - last.get(t, 0) < _MOVED_NS // 4 for t in moved):
                break
            last = now
        self.probe_ns = sum(max(last.get(t, 0) - r1.get(t, 0), 0) for t in moved)
        self.workers = moved
        return self.workers

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """BLAS on one thread for the block, then as it was."""
        was = [(c, c.num_threads) for c in self.controllers() if c.num_threads > 1]
        for c, _ in was:
            c.set_num_threads(1)
        try:
            yield
        finally:
            for c, n in was:
                c.set_num_threads(n)


POOL = BlasPool()
