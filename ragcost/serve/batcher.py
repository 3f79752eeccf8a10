"""Micro-batching: concurrent requests gathered for up to ``batch_window_ms`` or ``max_batch``
run through the stages as one batch, so the embed call is shared (and split, as the ledger
splits every batch call). The queue is bounded: a full one is refused at once (429), never a hang.

Admission by deadline: the batcher measures how long its recent batches took and fits a batch's
time as ``fixed + per_query * n`` (:class:`ServiceModel`; a batch shares its embed call, so a
large batch is cheaper per query than a small one). A request is admitted only when the work
ahead of it -- what is left of the running batch, then the queue in batches of ``max_batch`` --
lets it finish before its deadline; otherwise it is refused at once with the time the work ahead
needs to drain (the 429's Retry-After). The check reads a few numbers and takes no lock, so the
app makes it before reading the body (:meth:`Batcher.check`). A queued request whose deadline
would pass before its batch could end is never started: it is answered "deadline exceeded" at no
cost. A server seeds the model at startup with a few warm-up batches (``serve.warmup_queries``),
so a cold burst is admitted by measurement rather than refused wholesale; the first real batches
replace the seed.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from time import monotonic, time_ns
from typing import Any, Callable, Optional

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
    answered_at: float = 0.0  # monotonic seconds its batch ended (the commit and the response come after)
    user: Optional[str] = None  # the OpenAI request's user: the query's ledger label
    body: Optional[bytes] = None  # the answer's /v1/query JSON, rendered in the batch thread (off the event loop)
    stream: bool = False  # a streamed chat request: a held stream is released through the gate, if any
    started_ns: int = 0  # wall-clock ns its batch began (the start of its query's span)


# A batch may run this much longer than the model says before a request in it would miss its
# deadline: the start check and admission both leave this share of slack.
MARGIN = 1.2
RELEASE = 4  # answers handed back an event-loop turn


def _top(sorted_xs: list[float]) -> float:
    """The 95th percentile of a sorted list; its largest under 8 (too few to leave one out)."""
    return sorted_xs[-1] if len(sorted_xs) < 8 else sorted_xs[int(0.95 * (len(sorted_xs) - 1))]


class ServiceModel:
    """How long a batch of ``n`` takes: ``fixed + per_query * n``, fitted to recent batches.

    Least squares over the recent (n, seconds) pairs when they hold at least two batch sizes
    (with ``fixed`` and ``per_query`` kept at 0 or above: a batch whose time does not grow with
    its size, as concurrent generation's, is one time at any size); otherwise (one size seen)
    proportional to ``n``, which over-estimates a larger batch: the safe side. Seed batches
    (warm-up) count until ``real_needed`` real batches have ended."""

    def __init__(self, keep: int = 32, real_needed: int = 2) -> None:
        self._recent: deque[tuple[int, float]] = deque(maxlen=keep)
        self._seed: list[tuple[int, float]] = []
        self._real = 0
        self.real_needed = real_needed
        self.fixed: Optional[float] = None
        self.per_query: Optional[float] = None
        self._errors: deque[float] = deque(maxlen=64)  # recent batches' actual / what the model said before each
        self._margin = MARGIN

    def margin(self) -> float:
        """How much longer than the model a batch may run (computed when a batch ends: a check reads one number).

        Two estimates, and the smaller: the 95th percentile (the largest, under 8 batches) of recent batches'
        actual time / what the model said *before* each (it catches a model lagging a load that changed), and
        the same of the batches the model is fitted to / what it says for them *now* (:meth:`_in_sample`). Each
        fails where the other does not. Before each alone: a model fitted to two guard-blocked queries (15 ms)
        once predicted 16 ms for a generated answer that took 0.9 s, and that one ratio (57x) as the margin
        refused every request on an idle server. Now alone: under overload the fit's small batches sit above
        it, and the margin refused work it could do (the overload bench's goodput 0.884 of saturation, from
        0.951 with the ratios before each). At least ``MARGIN``."""
        return self._margin

    def _update_margin(self) -> None:
        errors = sorted(self._errors)
        before = _top(errors) if errors else MARGIN
        self._margin = max(MARGIN, min(before, self._in_sample()))

    def _in_sample(self) -> float:
        """The batches the model is fitted to, each as actual / what the model says for it now: their upper end."""
        xs = sorted(t / self.batch_s(n) for n, t in self._points() if n > 0 and t > 0 and self.batch_s(n) > 0)
        return _top(xs) if xs else MARGIN

    def seed(self, n: int, seconds: float) -> None:
        self._seed.append((n, seconds))
        self._fit()
        self._update_margin()

    def add(self, n: int, seconds: float) -> None:
        predicted = self.batch_s(n)
        if predicted > 0:
            self._errors.append(seconds / predicted)
        self._recent.append((n, seconds))
        self._real += 1
        self._fit()
        self._update_margin()

    def _points(self) -> list[tuple[int, float]]:
        return list(self._recent) if self._real >= self.real_needed else self._seed + list(self._recent)

    def _fit(self) -> None:
        pts = [(n, t) for n, t in self._points() if n > 0 and t > 0]
        if not pts:
            return
        ns = [n for n, _ in pts]
        ts = [t for _, t in pts]
        mn, mt = sum(ns) / len(ns), sum(ts) / len(ts)
        var = sum((n - mn) ** 2 for n in ns)
        if var > 0:
            b = sum((n - mn) * (t - mt) for n, t in pts) / var
            a = mt - b * mn
            if b <= 0:  # no longer with more queries (concurrent generation): the same time at any size
                self.fixed, self.per_query = mt, 0.0
            elif a < 0:  # least squares through the origin
                self.fixed, self.per_query = 0.0, sum(n * t for n, t in pts) / sum(n * n for n in ns)
            else:
                self.fixed, self.per_query = a, b
            return
        self.fixed, self.per_query = 0.0, sum(ts) / sum(ns)  # one batch size seen: proportional

    @property
    def measured(self) -> bool:
        return self.per_query is not None

    def batch_s(self, n: int) -> float:
        """Seconds a batch of ``n`` should take (0 before anything was measured)."""
        if self.per_query is None or n <= 0:
            return 0.0
        return (self.fixed or 0.0) + self.per_query * n

    def rate(self, n: int) -> Optional[float]:
        """Queries per second at batch size ``n``."""
        t = self.batch_s(n)
        return n / t if t > 0 else None


class Batcher:
    def __init__(self, session: Session, window_ms: float, max_batch: int, max_queue: int, metrics: Any = None,
                 by_deadline: bool = True, render: Optional[Callable[[Answer], bytes]] = None, gate: Any = None) -> None:
        self.session = session
        self.render = render
        self.gate = gate  # ragcost.serve.gate.SentenceGate: a held stream released a sentence at a time
        self.window = window_ms / 1000
        self.max_batch = max_batch if window_ms > 0 else 1  # window 0: each request runs alone
        self._q: asyncio.Queue = asyncio.Queue(maxsize=max_queue)
        self._exec = ThreadPoolExecutor(1, thread_name_prefix="ragcost-batch")  # stages run one batch at a time
        self._task: Optional[asyncio.Task] = None
        self.metrics = metrics
        self.batches = 0
        self._running: Optional[asyncio.Future] = None  # the batch in the stages now
        self.batch_seconds: deque[float] = deque(maxlen=256)
        self.model = ServiceModel()
        self._tails: deque[float] = deque(maxlen=128)  # seconds from a batch's end to its answers' responses
        self.running_n = 0
        self._running_since = 0.0
        self.by_deadline = by_deadline

    @property
    def depth(self) -> int:
        return self._q.qsize()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def seed(self, n: int, seconds: float) -> None:
        """A warm-up batch of ``n`` took ``seconds``: what admission goes by until real batches are measured."""
        self.model.seed(n, seconds)

    def note_tail(self, seconds: float) -> None:
        """An answer was committed and sent ``seconds`` after its batch ended."""
        self._tails.append(seconds)

    def tail_s(self) -> float:
        """The 99th percentile of recent batch-end-to-response times: what a deadline must leave after the batch."""
        if not self._tails:
            return 0.0
        xs = sorted(self._tails)
        return xs[int(0.99 * (len(xs) - 1))]

    def check(self, deadline_s: float = math.inf) -> None:
        """QueueFull when a request arriving now would be refused: the queue is full or, by deadline, it could
        not finish within ``deadline_s``. Cheap (a few numbers, no lock): made before the body is read."""
        if self.depth >= self._q.maxsize > 0:
            raise QueueFull("queue", self.retry_after_s(), self.predicted_s())
        if not self.by_deadline:
            return
        predicted = self.predicted_s()
        if predicted is None:
            if self.ahead() >= self.max_batch:
                # Nothing measured yet (no warm-up): admit one batch's worth, not a flood.
                raise QueueFull("unmeasured", 1, None)
            return
        if predicted * self.model.margin() + self.tail_s() > deadline_s:
            raise QueueFull("deadline", self.retry_after_s(), predicted)

    def submit(self, state: QueryState, deadline_s: float = math.inf, arrived: Optional[float] = None) -> Ticket:
        """Queue ``state``; QueueFull when the queue is full or, by deadline, it could not finish in ``deadline_s``
        from ``arrived`` (monotonic seconds the request came in; default now)."""
        now = monotonic()
        arrived = now if arrived is None else min(arrived, now)
        self.check(deadline_s - (now - arrived))
        t = Ticket(state, asyncio.get_running_loop().create_future(), deadline=arrived + deadline_s)
        try:
            self._q.put_nowait(t)
        except asyncio.QueueFull:
            raise QueueFull("queue", self.retry_after_s(), self.predicted_s()) from None
        return t

    def rate(self) -> Optional[float]:
        """Queries per busy second at a full batch (None before anything was measured)."""
        return self.model.rate(self.max_batch)

    def ahead(self) -> int:
        return self.depth + self.running_n

    def _running_left(self) -> float:
        if not self.running_n:
            return 0.0
        return max(0.0, self.model.batch_s(self.running_n) - (monotonic() - self._running_since))

    def predicted_s(self, extra: int = 1) -> Optional[float]:
        """Seconds for a request admitted now to finish: the rest of the running batch, then the queue (and it)
        in batches of ``max_batch``, plus the gathering window. None before anything was measured."""
        if not self.model.measured:
            return None
        full, rest = divmod(self.depth + extra, self.max_batch)
        queued = full * self.model.batch_s(self.max_batch) + self.model.batch_s(rest)
        return self._running_left() + queued + self.window

    def retry_after_s(self) -> int:
        """Retry-After for a 429: the seconds the work ahead needs to drain, by the model (at least 1)."""
        drain = self.predicted_s(extra=0)
        if drain is None:
            per = (sum(self.batch_seconds) / len(self.batch_seconds)) if self.batch_seconds else 0.1
            drain = per * (self.depth / self.max_batch + 1)
        return max(1, math.ceil(drain))

    def _batch_s(self, n: int) -> float:
        """How long a batch of ``n`` should take, with the margin (0 before anything was measured)."""
        return self.model.batch_s(n) * self.model.margin()

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
                end = monotonic() + self._batch_s(len(batch)) + self.tail_s()
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

            gate = self.gate

            def on_event(s: QueryState, kind: str, payload: str) -> None:
                # In the batch thread, inside the generate stage's call (a gate's checks are its CPU).
                t = by_state.get(id(s))
                if t is None:
                    return
                if gate is not None and t.stream:
                    for piece in gate.event(s, kind, payload):
                        loop.call_soon_threadsafe(t.events.put_nowait, ("released", piece))
                if kind != "sources":
                    loop.call_soon_threadsafe(t.events.put_nowait, (kind, payload))

            began = time_ns()
            for t in batch:
                t.started, t.started_ns = True, began
            t0 = monotonic()
            self.running_n, self._running_since = len(batch), t0
            self._running = loop.run_in_executor(self._exec, self._run, [t.state for t in batch], on_event)
            bodies: list[Optional[bytes]] = [None] * len(batch)
            try:
                answers, bodies = await self._running
            except Exception as e:  # a failing stage fails this batch's requests, not the server
                # The runner raised, so the calls it made are not priced here: each query is recorded
                # as failed with the error and no stage rows (the cost of a raising stage is unknown).
                answers = [failed_answer(t.state, f"{type(e).__name__}: {e}") for t in batch]
            finally:
                self._running = None
                self.running_n = 0
                if gate is not None:
                    for t in batch:
                        gate.forget(t.state)
            self.batches += 1
            self.batch_seconds.append(monotonic() - t0)
            self.model.add(len(batch), monotonic() - t0)
            if self.metrics is not None:
                self.metrics.batch(len(batch))
            ended = monotonic()
            for i, (t, a, body) in enumerate(zip(batch, answers, bodies)):
                t.answered_at, t.body = ended, body
                if not t.answer.done():
                    t.answer.set_result(a)
                if i % RELEASE == RELEASE - 1:
                    # A few answers an event-loop turn: requests that arrived meanwhile (a 429 is a few
                    # comparisons) are read between them, not after the whole batch's responses.
                    await asyncio.sleep(0)

    def _run(self, states: list[QueryState], on_event) -> tuple[list[Answer], list[Optional[bytes]]]:
        """In the batch thread: the stages, then each answer's response body (JSON encoding is no loop's work)."""
        answers = self.session.run_batch(states, on_event)
        bodies: list[Optional[bytes]] = [None] * len(answers)
        if self.render is not None:
            for i, a in enumerate(answers):
                try:
                    bodies[i] = self.render(a)
                except Exception:  # rendered again on the loop, where its error is reported
                    pass
        return answers, bodies

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
