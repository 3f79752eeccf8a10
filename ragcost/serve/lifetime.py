"""``ragcost serve``'s provisioned time: one lifetime row per server process, from startup to shutdown.

The server holds its instance whether it serves or idles, so its whole life is provisioned time
(:mod:`ragcost.cost.lifetime`); ``report`` sets it beside the busy time its queries used. The row
has its own ledger connection, so it is written before warm-up and closed after the last query's
rows, and heartbeats go on while the server idles.
"""

from __future__ import annotations

import os
from typing import Optional

from ragcost import process
from ragcost.cost.lifetime import HEARTBEAT_S, Lifetime

HEARTBEAT_ENV = "RAGCOST_HEARTBEAT_S"  # seconds between heartbeats (tests shorten it)


def heartbeat_s() -> float:
    return float(os.environ.get(HEARTBEAT_ENV) or HEARTBEAT_S)


def start_serve_lifetime(svc) -> Optional[Lifetime]:
    """Record that this server process started; None when the session writes no ledger."""
    from ragcost.cost.ledger import Ledger
    from ragcost.runtime.cpu import METER

    METER.whole_process()  # every thread of a server process is ragcost's: its HTTP work is overhead
    session = svc.session
    if session.ledger is None:
        return None
    interval = heartbeat_s()
    ledger = Ledger(session.ledger.url)
    # A server the `ragcost` command started held its instance from the process's start (imports, loading the
    # pipeline), not from here; its start-up ends when the warm-up is done (``ready_serve_lifetime``).
    at = process.started_at() if process.owned() else None
    return Lifetime(ledger, "serve", session.name, session.pipe.config.resource, interval_s=interval,
                    replica=session.replica).start(at=at)


def ready_serve_lifetime(life: Optional[Lifetime]) -> None:
    """The warm-up is done: the server's start-up phase ends."""
    if life is not None:
        life.ready()


def stop_serve_lifetime(life: Optional[Lifetime]) -> None:
    """The last request is done. In a process the `ragcost` command owns, the row is closed at the process's exit
    (shutdown from now until then); otherwise now."""
    from ragcost.cost.ledger import utcnow
    from ragcost.runtime.cpu import METER

    METER.whole_process(False)
    if life is None:
        return
    if process.owned():
        process.at_exit(_stop, life, utcnow())
    else:
        _stop(life, None)


def _stop(life: Lifetime, stopping_at) -> None:
    try:
        life.stop(stopping_at=stopping_at)
    finally:
        life.ledger.close()
