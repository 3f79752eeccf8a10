"""The server and Python's cyclic garbage collector: refusals leave no reference cycles behind, and full
collections run on the server's terms (serve.gc_full_s), not the collector's thresholds.

A full collection holds the GIL while it walks every live object; at 2x saturation the collector's own
rule ran one every few seconds, each pausing every request (429s included) for 30-700 ms.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serve.conftest import ServerThread, variant

PACKAGE = str(Path(__file__).resolve().parents[2] / "ragcost")


def _ours(o) -> bool:
    """Garbage the server made: a ragcost exception, or one raised through a ragcost frame. The test process also
    holds what earlier tests' leftover threads dropped (a urllib3 retry's ConnectionRefusedError, say)."""
    if type(o).__module__.startswith("ragcost"):
        return True
    tb = getattr(o, "__traceback__", None)
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(PACKAGE):
            return True
        tb = tb.tb_next
    return False

CLIENT = """
import asyncio, httpx, sys
async def main():
    async with httpx.AsyncClient(base_url=sys.argv[1], timeout=30) as c:
        rs = await asyncio.gather(*(c.post("/v1/query", json={"text": f"refund {i}"}) for i in range(int(sys.argv[2]))))
    print(" ".join(str(r.status_code) for r in rs))
asyncio.run(main())
"""


@pytest.fixture(scope="module")
def refusing(kb_served):
    """One request at a time, a word every 50 ms: a burst is mostly 429s (no keys: the client needs none)."""
    p = variant(kb_served, "gc-slow.yaml", stages=[{"type": "retrieve", "k": 3}, {"type": "generate", "backend": "slow-words"}],
                serve={"batch_window_ms": 0, "max_queue": 1, "deadline_s": 5, "admission": "queue"})
    with ServerThread(p) as s:
        yield s


def _burst(url: str, n: int) -> list[int]:
    """``n`` concurrent requests from another process (its objects are not this one's garbage)."""
    out = subprocess.run([sys.executable, "-c", CLIENT, url, str(n)], capture_output=True, text=True, timeout=120, check=True)
    return [int(x) for x in out.stdout.split()]


class TestNoCycles:
    def test_refused_and_answered_requests_leave_no_exception_or_frame_cycles(self, refusing):
        _burst(refusing.url, 10)  # warm
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage, for a look
        try:
            codes = _burst(refusing.url, 100)
            asyncio.run(asyncio.sleep(1.5))  # the admitted requests' batches end
            gc.collect()
            found = list(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        assert codes.count(429) > 50
        # Before: every refusal left its HTTPError, its QueueFull, their tracebacks and the frames of
        # endpoint/query/submit/check (and each body read a StopAsyncIteration in wait_for's frame): ~40 objects.
        exceptions = [type(o).__name__ for o in found if isinstance(o, BaseException) and _ours(o)]
        frames = [o.f_code.co_name for o in found if type(o).__name__ == "frame" and o.f_code.co_filename.startswith(PACKAGE)]
        assert not exceptions and not frames, (exceptions[:5], frames[:5])


class TestFullCollections:
    def test_serving_turns_automatic_full_collections_off_and_stopping_restores_them(self, kb_served):
        before = gc.get_threshold()
        with ServerThread(variant(kb_served, "gc-default.yaml")) as s:
            assert s.service.config.gc_full_s == 300
            t0, t1, t2 = gc.get_threshold()
            assert (t0, t1) == before[:2] and t2 > 10**9
        assert gc.get_threshold() == before

    def test_gc_full_s_0_leaves_the_collector_alone(self, kb_served):
        before = gc.get_threshold()
        with ServerThread(variant(kb_served, "gc-off.yaml", serve={"gc_full_s": 0})):
            assert gc.get_threshold() == before
