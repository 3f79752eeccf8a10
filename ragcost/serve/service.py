"""What the app runs on: the session, the batcher, the one ledger writer, keys and metrics."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from pathlib import Path
from typing import Any, Optional

from ragcost.runtime.api import Answer, Session, and_filters
from ragcost.serve.batcher import Batcher, Ticket, failed_answer
from ragcost.serve.keys import Tenant, load_keys, read_secret
from ragcost.serve.metrics import Metrics
from ragcost.serve.options import Capabilities
from ragcost.serve.render import public_bytes
from ragcost.serve.writer import LedgerWriter


NO_AUTO_FULL = 2**31 - 1  # gen-1 collections before the collector considers a full one: never, in practice
IDLE_POLL_S = 0.5
IDLE_FULL_MIN_S = 10.0  # an idle server collects at most this often (and only after serving since the last)


class Service:
    def __init__(self, pipeline: str | Path, ledger_url: Optional[str] = None, tracer_provider: Any = None,
                 replica: Optional[str] = None) -> None:
        from ragcost.serve.replica import replica_name

        # serve records its own lifetime (ragcost.serve.lifetime) and its query spans under each request's span
        self.session = Session(pipeline, ledger_url=ledger_url, lifetime=None, trace=False)
        cfg = self.session.pipe.config.serve
        self.replica = self.session.replica = replica_name(replica, cfg.replica)
        self.config = cfg
        where = self.session.pipe.loaded.where
        self.keys = load_keys(cfg.keys, self.session.pipe.base, where(["serve", "keys"]), cfg.keys_reload_s,
                              check=self.session.check_declared)
        self.metrics_token = read_secret(cfg.metrics_key, self.session.pipe.base, where(["serve", "metrics_key"]))
        self.metrics = Metrics(self.replica)
        self.metrics.known_tenants(self.keys.tenants)
        self.batcher = Batcher(self.session, cfg.batch_window_ms, cfg.max_batch, cfg.max_queue, self.metrics,
                               by_deadline=cfg.admission == "deadline", render=public_bytes)
        self.caps = Capabilities.of(self.session.pipe)
        self.hold_stream = holds_answers(self.session.pipe)
        if self.hold_stream:
            from ragcost.serve.gate import SentenceGate

            self.batcher.gate = SentenceGate.of(self.session.pipe)  # None: held whole
        from ragcost.serve.spans import request_spans

        self.spans = request_spans(self, ledger_url, tracer_provider)  # None unless tracing is on
        self.writer: Optional[LedgerWriter] = None
        self._collector: Optional[asyncio.Task] = None
        self.ready = False
        self.started_at = int(time.time())

    @property
    def name(self) -> str:
        return self.session.name

    async def start(self) -> None:
        """Warm up off the event loop (so /healthz answers meanwhile), then take requests."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.session.warm_up)
        await loop.run_in_executor(None, self._measure)
        # Everything loaded so far (models, index, imports) lives as long as the server: out of the
        # collector's sight, so a full collection does not walk it (it paused requests for tens of ms).
        gc.collect()
        gc.freeze()
        if self.config.gc_full_s > 0:
            self._collector = asyncio.get_running_loop().create_task(self._full_collections())
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(self.config.gil_switch_ms / 1000.0)  # a 429 should not wait out the batch thread's 5 ms slices
        self.writer = LedgerWriter(self.session)
        self.batcher.start()
        self.ready = True

    async def _full_collections(self) -> None:
        """Full collections on the server's terms (``serve.gc_full_s``): when it has gone idle after serving, else
        at the latest every ``gc_full_s`` seconds. At 2x saturation the collector's own rule ran one every
        10-20 s (the requests in flight age into the oldest generation), each holding the GIL for 30-90 ms of
        CPU (far longer in wall time on a loaded machine) while every request and 429 waited; with no
        reference cycle per request left, there is little for it to free (300-900 objects in 10-20 s).
        Gen-0 and gen-1 collections stay automatic."""
        t0, t1, t2 = gc.get_threshold()
        gc.set_threshold(t0, t1, NO_AUTO_FULL)
        try:
            last, served = time.monotonic(), self.batcher.batches
            while True:
                await asyncio.sleep(IDLE_POLL_S)
                now = time.monotonic()
                idle = self.batcher.ahead() == 0 and self.batcher.batches != served
                if (idle and now - last >= IDLE_FULL_MIN_S) or now - last >= self.config.gc_full_s:
                    gc.collect()
                    last, served = time.monotonic(), self.batcher.batches
        finally:
            gc.set_threshold(t0, t1, t2)

    def _measure(self) -> None:
        """Seed admission's service model: a batch of 1, then one of ``serve.warmup_queries``, timed, recorded nowhere."""
        n = min(self.config.warmup_queries, self.batcher.max_batch)
        if n < 1 or any(st.remembers_queries for st in self.session.pipe.stages()):
            return
        from ragcost.runtime.cpu import METER

        text = warmup_text(self.session)
        for size in sorted({1, n}):
            t0 = time.monotonic()
            try:
                self.session.run_batch([self.session.state(text) for _ in range(size)])
            except Exception:  # a failing warm-up is the first real batch's to report; admission waits for it
                return
            self.batcher.seed(size, time.monotonic() - t0)
        METER.baseline()  # the warm-up is no query's CPU

    async def stop(self) -> None:
        """After uvicorn has drained the requests in flight: stop the batcher, flush the ledger, close."""
        self.ready = False
        if self._collector is not None:
            self._collector.cancel()  # the collector's thresholds as they were
            try:
                await self._collector
            except asyncio.CancelledError:
                pass
        await self.batcher.drain()
        if self.writer is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.writer.close)
        self.session.close()
        if getattr(self, "_switch", None):
            sys.setswitchinterval(self._switch)  # an in-process server (tests, an embedding app) leaves it as it found it

    def reload_keys(self) -> None:
        """SIGHUP, or the keys file changed: read it again (revoked keys are refused from now on)."""
        if self.keys.reload():
            self.metrics.known_tenants(self.keys.tenants)

    async def submit(self, text: str, filter_: Optional[dict], k: Optional[int], tenant: Optional[Tenant],
                     options: Optional[dict] = None, user: Optional[str] = None, arrived: Optional[float] = None) -> Ticket:
        """Queue one query; the key's filter is ANDed in, so a caller can narrow it but never widen it."""
        key_filter = tenant.filter if tenant else None
        combined = and_filters(key_filter, filter_)
        name = tenant.name if tenant else None
        # A filter is compiled against the declared fields here: a bad one is this request's 422 alone.
        state = self.session.state(text, combined, k, name)
        state.options = dict(options or {})
        t = self.batcher.submit(state, self.config.deadline_s, arrived)
        t.user = user
        self.metrics.queue_depth.set(self.batcher.depth)
        return t

    async def commit(self, t: Ticket, answer: Answer) -> None:
        """Write the answer's rows; the response completes only after this."""
        t.recorded = True
        answer.user = t.user
        self.metrics.answer(answer.rows, answer.outcome, answer.outcome == "finished" and answer.ok, answer.tenant)
        await self.writer.write(answer)
        if t.answered_at:
            self.batcher.note_tail(time.monotonic() - t.answered_at)

    def abandon(self, t: Ticket, reason: str) -> None:
        """The client gave up: skip the rest of its work and record what it cost, with ``reason``."""
        if t.recorded:
            return
        t.recorded = True
        self.batcher.abandon(t, reason)
        if not t.started:  # never ran: recorded at no cost, so every accepted request has a row
            a = failed_answer(t.state, reason)
            a.user = t.user
            self.writer.submit(a)
            return

        def record(f: asyncio.Future) -> None:
            if f.cancelled() or f.exception() is not None:
                return
            a = f.result()
            a.abandon(reason)
            a.user = t.user
            self.metrics.answer(a.rows, a.outcome, False, a.tenant)
            self.writer.submit(a)

        t.answer.add_done_callback(record)


def warmup_text(session: Session) -> str:
    """A question like a user's: the first words of the first stored chunk (a fixed one when the store has none)."""
    try:
        rows = session.pipe.store().chunks([0])
    except Exception:
        rows = []
    words = (rows[0].get("text") or "").split()[:12] if rows else []
    return " ".join(words) or "what does the first document say?"


def holds_answers(pipe) -> bool:
    """Whether a guard on the answer may block or rewrite it: then a stream is held until the answer passed.

    Streaming the pieces as they come would let a blocked (or redacted) answer's text out before
    the guard ran; a guard that only flags changes nothing, so its pipeline streams freely."""
    return any(st.holds_answer() for st in pipe.stages())
