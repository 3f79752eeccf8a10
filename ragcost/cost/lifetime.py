"""A process's provisioned time in the ledger: start, heartbeats, stop (``rc_ledger_lifetimes``).

``ragcost serve`` holds its instance from startup to shutdown, serving or idle; a batch
``ragcost query --queries`` holds it for its wall time. Both record that here, so ``report``
can set the provisioned hours beside the busy ones (:mod:`ragcost.cost.bill`). Heartbeats every
``interval_s`` bound a process that dies without stopping: its lifetime ends at its last beat.
A heartbeat that cannot be written (the database is away) is skipped, never fatal: the next one
extends the lifetime again.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Optional

from ragcost.cost.ledger import Ledger

HEARTBEAT_S = 30.0
# A batch process (`ragcost query --queries`, eval's scratch ledger) beats after a batch only when this long has passed
# since its last beat: one at a time, a beat after every query was its own transaction, 2.9 of the 9.4 ms of CPU a
# query's ledger write took on DuckDB (31%, `python -m bench.ledger_beat`), to move a crash's bound by milliseconds.
BATCH_HEARTBEAT_S = 1.0


class Beat:
    """Heartbeats of a batch process's lifetime row, written after a batch at most every ``every_s`` seconds."""

    def __init__(self, ledger: Ledger, lifetime_id: str, every_s: float = BATCH_HEARTBEAT_S) -> None:
        self.ledger, self.lifetime_id, self.every_s = ledger, lifetime_id, every_s
        self._last = time.monotonic()  # start_lifetime wrote heartbeat_at

    def after_batch(self) -> bool:
        """Beat if ``every_s`` has passed since the last beat; whether it did."""
        now = time.monotonic()
        if now - self._last < self.every_s:
            return False
        self.ledger.heartbeat(self.lifetime_id)
        self._last = now
        return True


class Lifetime:
    """One process's lifetime row; ``start()`` writes it, ``stop()`` closes it; beats in between on a thread."""

    def __init__(self, ledger: Ledger, kind: str, pipeline: str, resource: str, run_id: Optional[str] = None,
                 workers: int = 1, interval_s: float = HEARTBEAT_S, replica: Optional[str] = None) -> None:
        self.ledger, self.kind, self.pipeline, self.resource = ledger, kind, pipeline, resource
        self.run_id, self.workers, self.interval_s, self.replica = run_id, workers, interval_s, replica
        self.id: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self, beat: bool = True, at: Optional[datetime] = None) -> "Lifetime":
        """Write the row: the process held its instance from ``at`` (its start, when known), else from now."""
        self.id = self.ledger.start_lifetime(self.kind, self.pipeline, self.resource, self.run_id, self.workers,
                                             replica=self.replica, at=at)
        if beat and self.interval_s > 0:
            self._thread = threading.Thread(target=self._beat, name="ragcost-lifetime", daemon=True)
            self._thread.start()
        return self

    def beat(self) -> None:
        if self.id is None:
            return
        try:
            self.ledger.heartbeat(self.id)
        except Exception:  # a ledger briefly away must not stop the server; the next beat extends it
            pass

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()

    def ready(self) -> None:
        """Loading is done: the start-up phase ends now."""
        if self.id is not None:
            try:
                self.ledger.mark_ready(self.id)
            except Exception:  # like a heartbeat: the phase mark is not worth failing the server for
                pass

    def stop(self, stopping_at: Optional[datetime] = None) -> None:
        """Close the row now; ``stopping_at``: when the process's shutdown began (its last query was done)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.id is not None:
            self.ledger.stop_lifetime(self.id, stopping_at=stopping_at)
            self.id = None
