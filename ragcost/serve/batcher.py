"""Micro-batching: concurrent requests gathered for up to ``batch_window_ms`` or ``max_batch``
run through the stages as one batch, so the embed call is shared (and split, as the ledger
splits every batch call). The queue is bounded: a full one is refused at once (429), never a hang.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from time import monotonic
from typing import Any, Optional

from ragcost.records import QueryState
from ragcost.runtime.api import Answer, Session


def failed_answer(state: QueryState, error: str) -> Answer:
    """A query that never produced rows (it never ran, or its batch raised): recorded with ``error``, at no cost."""
    return Answer(id=state.id, text=state.text, hits=[], answer=None, citations=[], ok=False, error=error,
                  outcome="failed", tenant=state.tenant, useful=0, rows=[])


class QueueFull(Exception):
    """The bounded queue is full: the caller answers 429 with Retry-After."""


@dataclass
class Ticket:
    """One request in flight: its state, the events it streams and the answer it waits for."""

    state: QueryState
    answer: asyncio.Future
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    abandoned: Optional[str] = None  # why the client gave up (disconnect, deadline), if it did
    started: bool = False
    recorded: bool = False


class Batcher:
    def __init__(self, session: Session, window_ms: float, max_batch: int, max_queue: int, metrics: Any = None) -> None:
        self.session = session
        self.window = window_ms / 1000
        self.max_batch = max_batch if window_ms > 0 else 1  # window 0: each request runs alone
        self._q: asyncio.Queue = asyncio.Queue(maxsize=max_queue)
        self._exec = ThreadPoolExecutor(1, thread_name_prefix="ragcost-batch")  # stages run one batch at a time
        self._task: Optional[asyncio.Task] = None
        self.metrics = metrics
        self.batches = 0
        self._running: Optional[asyncio.Future] = None  # the batch in the stages now
        self.batch_seconds: list[float] = []

    @property
    def depth(self) -> int:
        return self._q.qsize()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def submit(self, state: QueryState) -> Ticket:
        t = Ticket(state, asyncio.get_running_loop().create_future())
        try:
            self._q.put_nowait(t)
        except asyncio.QueueFull:
            raise QueueFull() from None
        return t

    def retry_after_s(self) -> int:
        """A hint for 429: the time to run what is queued at the recent batch rate, at least 1 s."""
        recent = self.batch_seconds[-20:]
        per = sum(recent) / len(recent) if recent else 0.1
        return max(1, round(per * (self.depth / self.max_batch + 1)))

    async def _gather(self) -> list[Ticket]:
        batch = [await self._q.get()]
        end = monotonic() + self.window
        while len(batch) < self.max_batch:
            left = end - monotonic()
            try:
                batch.append(self._q.get_nowait() if left <= 0 else await asyncio.wait_for(self._q.get(), left))
            except (asyncio.QueueEmpty, asyncio.TimeoutError):
                break
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [t for t in await self._gather() if t.abandoned is None]
            if not batch:
                continue
            by_state = {id(t.state): t for t in batch}

            def on_event(s: QueryState, kind: str, payload: str) -> None:
                t = by_state.get(id(s))
                if t is not None:
                    loop.call_soon_threadsafe(t.events.put_nowait, (kind, payload))

            for t in batch:
                t.started = True
            t0 = monotonic()
            self._running = loop.run_in_executor(self._exec, self.session.run_batch, [t.state for t in batch], on_event)
            try:
                answers = await self._running
            except Exception as e:  # a failing stage fails this batch's requests, not the server
                # The runner raised, so the calls it made are not priced here: each query is recorded
                # as failed with the error and no stage rows (the cost of a raising stage is unknown).
                answers = [failed_answer(t.state, f"{type(e).__name__}: {e}") for t in batch]
            finally:
                self._running = None
            self.batches += 1
            self.batch_seconds.append(monotonic() - t0)
            if self.metrics is not None:
                self.metrics.batch(len(batch))
            for t, a in zip(batch, answers):
                if not t.answer.done():
                    t.answer.set_result(a)

    def abandon(self, t: Ticket, reason: str) -> None:
        """The client gave up: later stages skip its query (what ran is still charged and recorded)."""
        t.abandoned = reason
        if t.started and t.state.active:
            t.state.fail("serve", reason)

    async def drain(self) -> None:
        """Wait until every queued request has been taken, then stop the loop."""
        # Queued requests (of clients still waiting) and the running batch (whose abandoned queries
        # are recorded when it ends) finish first.
        while (self._q.qsize() or self._running is not None) and self._task is not None and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task is not None:
            self._task.cancel()
        self._exec.shutdown(wait=True)
