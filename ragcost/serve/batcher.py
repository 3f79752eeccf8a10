"""Micro-batching: concurrent requests gathered for up to ``batch_window_ms`` or ``max_batch``
run through the stages as one batch, so the embed call is shared (and split, as the ledger
splits every batch call). The queue is bounded: a full one is refused at once (429), never a hang.

Admission by deadline: the batcher measures its service rate (queries its recent batches
finished per busy second). A request is admitted only when the work ahead of it, at that rate,
lets it finish before its deadline; otherwise it is refused at once with the time the work
ahead needs to drain (the 429's Retry-After). A queued request whose deadline would pass before
its batch could end is never started: it is answered "deadline exceeded" at no cost.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
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


DEADLINE = "deadline exceeded"


class QueueFull(Exception):
    """The bounded queue is full, or the request could not finish before its deadline: 429 with Retry-After."""

    def __init__(self, reason: str = "queue", retry_after_s: int = 1, predicted_s: Optional[float] = None) -> None:
        super().__init__(reason)
        self.reason, self.retry_after_s, self.predicted_s = reason, retry_after_s, predicted_s


@dataclass
class Ticket:
    """One request in flight: its state, the events it streams and the answer it waits for."""

    state: QueryState
    answer: asyncio.Future
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    abandoned: Optional[str] = None  # why the client gave up (disconnect, deadline), if it did
    started: bool = False
    recorded: bool = False
    deadline: float = math.inf  # monotonic seconds: not started when its batch could not end by then
    user: Optional[str] = None  # the OpenAI request's user: the query's ledger label


class Batcher:
    def __init__(self, session: Session, window_ms: float, max_batch: int, max_queue: int, metrics: Any = None,
                 by_deadline: bool = True) -> None:
        self.session = session
        self.window = window_ms / 1000
        self.max_batch = max_batch if window_ms > 0 else 1  # window 0: each request runs alone
        self._q: asyncio.Queue = asyncio.Queue(maxsize=max_queue)
        self._exec = ThreadPoolExecutor(1, thread_name_prefix="ragcost-batch")  # stages run one batch at a time
        self._task: Optional[asyncio.Task] = None
        self.metrics = metrics
        self.batches = 0
        self._running: Optional[asyncio.Future] = None  # the batch in the stages now
        self.batch_seconds: deque[float] = deque(maxlen=256)
        self._recent: deque[tuple[int, float]] = deque(maxlen=32)  # (queries, seconds) of recent batches
        self.running_n = 0
        self.by_deadline = by_deadline

    @property
    def depth(self) -> int:
        return self._q.qsize()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def submit(self, state: QueryState, deadline_s: float = math.inf) -> Ticket:
        """Queue ``state``; QueueFull when the queue is full or, by deadline, it could not finish in ``deadline_s``."""
        predicted = self.predicted_s()
        if self.by_deadline and predicted is not None and predicted > deadline_s:
            raise QueueFull("deadline", self.retry_after_s(), predicted)
        if self.by_deadline and predicted is None and self.ahead() >= self.max_batch:
            # No batch has ended yet, so nothing says how fast they go: admit one batch's worth, not a flood.
            raise QueueFull("unmeasured", 1, None)
        t = Ticket(state, asyncio.get_running_loop().create_future(), deadline=monotonic() + deadline_s)
        try:
            self._q.put_nowait(t)
        except asyncio.QueueFull:
            raise QueueFull("queue", self.retry_after_s(), predicted) from None
        return t

    def rate(self) -> Optional[float]:
        """Queries per busy second over the recent batches (None before the first batch)."""
        n = sum(x for x, _ in self._recent)
        sec = sum(y for _, y in self._recent)
        return n / sec if sec > 0 else None

    def ahead(self) -> int:
        return self.depth + self.running_n

    def predicted_s(self, extra: int = 1) -> Optional[float]:
        """Seconds for a request admitted now to finish: the work ahead at the measured rate, plus the window."""
        r = self.rate()
        if r is None:
            return None
        return (self.ahead() + extra) / r + self.window

    def retry_after_s(self) -> int:
        """Retry-After for a 429: the seconds the work ahead needs to drain at the measured rate (at least 1)."""
        r = self.rate()
        per = (sum(self.batch_seconds) / len(self.batch_seconds)) if self.batch_seconds else 0.1
        drain = self.ahead() / r if r else per * (self.depth / self.max_batch + 1)
        return max(1, math.ceil(drain))

    def _batch_s(self, n: int) -> float:
        """How long a batch of ``n`` should take: ``n`` at the measured rate (0 before the first batch)."""
        r = self.rate()
        return n / r if r else 0.0

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
            while self.by_deadline and batch:  # a request whose batch would end past its deadline is never computed or billed
                end = monotonic() + self._batch_s(len(batch))
                late = [t for t in batch if t.deadline < end]
                if not late:
                    break
                for t in late:
                    if not t.answer.done():
                        t.answer.set_result(failed_answer(t.state, DEADLINE))
                batch = [t for t in batch if t.deadline >= end]
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
            self.running_n = len(batch)
            self._running = loop.run_in_executor(self._exec, self.session.run_batch, [t.state for t in batch], on_event)
            try:
                answers = await self._running
            except Exception as e:  # a failing stage fails this batch's requests, not the server
                # The runner raised, so the calls it made are not priced here: each query is recorded
                # as failed with the error and no stage rows (the cost of a raising stage is unknown).
                answers = [failed_answer(t.state, f"{type(e).__name__}: {e}") for t in batch]
            finally:
                self._running = None
                self.running_n = 0
            self.batches += 1
            self.batch_seconds.append(monotonic() - t0)
            self._recent.append((len(batch), monotonic() - t0))
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
