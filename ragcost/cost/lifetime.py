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
from datetime import datetime
from typing import Optional

from ragcost.cost.ledger import Ledger

HEARTBEAT_S = 30.0


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
