"""The one ledger writer: a thread that drains finished queries, committing those waiting together.

Only this thread writes, so DuckDB's single writer is never contended. A request's response
completes only after its rows are committed, so ``kill -9`` loses no completed query, and since a
query's rows are always in one transaction, leaves no partial one. The queries waiting when the
writer turns to the queue go in one transaction (a group commit, up to ``GROUP``): one commit
a query cost ~8 ms of CPU on the demo, so a busy server spent more on its ledger than on the
queries. A group that fails is written again one query at a time, so one bad query fails alone.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Optional

from ragcost.runtime.api import Answer, Session

GROUP = 256  # queries at most in one commit


class LedgerWriter:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._q: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="ragcost-ledger", daemon=True)
        self._thread.start()
        self.written = 0
        self.failed = 0

    def submit(self, answer: Answer, done: Optional[asyncio.Future] = None) -> None:
        self._q.put((answer, done))

    async def write(self, answer: Answer) -> None:
        """Commit ``answer``'s rows; returns once they are in the ledger."""
        fut = asyncio.get_running_loop().create_future()
        self.submit(answer, fut)
        await fut

    def _drain(self) -> None:
        while True:
            item = self._q.get()
            group, stop = [item], item is None
            while not stop and len(group) < GROUP:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                else:
                    group.append(nxt)
            group = [g for g in group if g is not None]
            if group:
                self._write(group)
            if stop:
                return

    def _write(self, group: list[tuple[Answer, Optional[asyncio.Future]]]) -> None:
        errors: list[Optional[BaseException]] = [None] * len(group)
        if len(group) == 1:
            errors[0] = _last_error(lambda: self.session.record(group[0][0]))
        elif _last_error(lambda: self.session.record_many([a for a, _ in group])) is not None:
            # one at a time: a bad query fails alone, the others are written
            errors = [_last_error(lambda a=a: self.session.record(a)) for a, _ in group]
        for (_, fut), err in zip(group, errors):
            if err is None:
                self.written += 1
            else:
                self.failed += 1
            if fut is not None:  # reported to the waiting request; the writer goes on
                fut.get_loop().call_soon_threadsafe(_settle, fut, err)

    def close(self) -> None:
        """Flush every queued query, then stop."""
        self._q.put(None)
        self._thread.join()


def _last_error(fn) -> Optional[BaseException]:
    try:
        fn()
    except Exception as e:
        return e
    return None


def _settle(fut: asyncio.Future, err: Optional[BaseException]) -> None:
    if fut.done():
        return
    if err is None:
        fut.set_result(None)
    else:
        fut.set_exception(err)
