"""`ragcost serve` with probes, for finding where a refused request's time goes (bench/serve_overload.py --probe).

    python -m bench.serve_probe serve PIPELINE --port N ...   (RAGCOST_PROBE_OUT=FILE: where the JSON goes at exit)

Nothing here changes what the server does; it records, in the server process:

- per request with an ``X-Bench-Id`` header: the server-side time from the first bytes of the request
  (the protocol's ``data_received``) to the app's call (the event loop's delay in starting it), and
  to the last byte of the response handed to the transport, with its status;
- every cyclic-GC collection: generation and pause (``gc.callbacks``);
- event-loop lag: a 1 ms ticker's lateness, each late tick over 5 ms with when it happened.

Times are ``time.perf_counter()`` seconds (the same clock as the bench client's on one machine,
CLOCK_MONOTONIC on Linux), so the client's and the server's records can be lined up.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import json
import os
import sys
import threading
import time

REQUESTS: dict[str, dict] = {}
GC: list[tuple[float, int, float, float, str, int]] = []  # (at, generation, pause s, CPU s of the thread, thread, collected)
GEN2: list[dict] = []  # every 10 s: objects in the collector's oldest generation, by type
LAG: list[tuple[float, float]] = []  # (at, seconds late)
_gc_start: dict[int, float] = {}


def _gc(phase: str, info: dict) -> None:
    now = time.perf_counter()
    tid = threading.get_ident()
    if phase == "start":
        _gc_start[tid] = (now, time.thread_time())
    else:
        t0 = _gc_start.pop(tid, None)
        if t0 is not None:
            GC.append((t0[0], int(info.get("generation", -1)), now - t0[0], time.thread_time() - t0[1],
                       threading.current_thread().name, int(info.get("collected", 0))))


async def _census() -> None:
    from collections import Counter

    while True:
        await asyncio.sleep(10)
        objs = gc.get_objects(2)
        GEN2.append({"at": time.perf_counter(), "n": len(objs), "count": list(gc.get_count()),
                     "top": Counter(type(o).__name__ for o in objs).most_common(12)})
        del objs


async def _ticker() -> None:
    step = 0.001
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(step)
        late = time.perf_counter() - t0 - step
        if late > 0.005:
            LAG.append((t0, late))


def _install() -> None:
    from ragcost.serve import app as app_mod
    from ragcost.serve import protocol

    gc.callbacks.append(_gc)

    from ragcost.config.pipeline import ServeConfig

    proto = protocol.protocol_class(os.environ.get("RAGCOST_PROBE_HTTP", ServeConfig().http))  # what run.py serves with
    orig_received = proto.data_received

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter()
        before = getattr(self, "cycle", None)
        orig_received(self, data)
        cycle = getattr(self, "cycle", None)
        if cycle is not None and cycle is not before:
            cycle.scope["bench.rx"] = t

    proto.data_received = data_received

    orig_build = app_mod.build_app

    def build_app(*a, **kw):
        inner = orig_build(*a, **kw)

        async def probed(scope, receive, send):
            if scope["type"] == "lifespan":
                asyncio.get_running_loop().create_task(_ticker())
                if os.environ.get("RAGCOST_PROBE_CENSUS"):
                    asyncio.get_running_loop().create_task(_census())
                return await inner(scope, receive, send)
            if scope["type"] != "http":
                return await inner(scope, receive, send)
            bid = dict(scope.get("headers") or []).get(b"x-bench-id")
            if bid is None:
                return await inner(scope, receive, send)
            called = time.perf_counter()
            rec = {"rx": scope.get("bench.rx", called), "called": called, "status": None, "done": None}
            REQUESTS[bid.decode()] = rec

            async def probed_send(msg):
                if msg["type"] == "http.response.start":
                    rec["status"] = msg["status"]
                await send(msg)
                if msg["type"] == "http.response.body" and not msg.get("more_body"):
                    rec["done"] = time.perf_counter()

            return await inner(scope, receive, probed_send)

        probed.state = inner.state  # type: ignore[attr-defined]
        return probed

    app_mod.build_app = build_app


def _dump() -> None:
    out = os.environ.get("RAGCOST_PROBE_OUT")
    if not out:
        return
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"requests": REQUESTS, "gc": GC, "lag": LAG, "gen2": GEN2, "gc_threshold": gc.get_threshold(),
                   "gc_frozen": gc.get_freeze_count()}, f)


def main() -> int:
    _install()
    atexit.register(_dump)
    from ragcost.cli.main import main as cli

    try:
        return cli(sys.argv[1:])
    finally:
        _dump()


if __name__ == "__main__":
    raise SystemExit(main())
