"""The one ledger writer: a thread that drains finished queries, one transaction each.

Only this thread writes, so DuckDB's single writer is never contended. A request's response
completes only after its rows are committed, so ``kill -9`` loses no completed query and, since
each query is one transaction, leaves no partial one.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Optional

from ragcost.runtime.api import Answer, Session


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
            if item is None:
                return
            answer, fut = item
            err: Optional[BaseException] = None
            try:
                self.session.record(answer)
                self.written += 1
            except Exception as e:  # reported to the waiting request; the writer goes on
                self.failed += 1
                err = e
            if fut is not None:
                loop = fut.get_loop()
                loop.call_soon_threadsafe(_settle, fut, err)

    def close(self) -> None:
        """Flush every queued query, then stop."""
        self._q.put(None)
        self._thread.join()


def _settle(fut: asyncio.Future, err: Optional[BaseException]) -> None:
    if fut.done():
        return
    if err is None:
        fut.set_result(None)
    else:
        fut.set_exception(err)
