"""Which replica a ``ragcost serve`` process is, when several share one ledger, store and cache.

A replica is one ``ragcost serve`` command: one address, its ``--workers`` processes included. Its
name goes on its ledger rows (runs, queries, lifetimes) and on every ``/metrics`` sample as the
``replica`` label, so ``report`` can split the bill by replica and Prometheus can ``sum by``.
The name comes from ``--replica``, else ``serve.replica``, else ``host:port`` (stable across a
restart of the same server, so the label's cardinality is the number of servers, not of restarts).

Two live servers with one name would be reported as one replica (their provisioned hours still
add up: each has its own lifetime rows). ``ragcost serve`` warns at startup when the ledger shows
a live server of that name on another process; it does not refuse, because a server restarted
right after a crash finds its own last heartbeat still fresh.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from datetime import timedelta
from typing import Optional

from ragcost.config.pipeline import REPLICA_PATTERN, REPLICA_RULE
from ragcost.errors import ConfigError

ENV = "RAGCOST_SERVE_REPLICA"  # how ``--workers N`` processes learn the replica they belong to


def default_replica(port: int) -> str:
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:56] or "host"
    return f"{host}:{port}"


def check_replica(name: str, where: str = "--replica") -> str:
    if not re.fullmatch(REPLICA_PATTERN, name):
        raise ConfigError(f"{where} {name!r}: {REPLICA_RULE}")
    return name


def replica_name(given: Optional[str], configured: Optional[str]) -> str:
    """The name: ``given`` (build_app's argument), else the one ``ragcost serve`` chose, else serve.replica, else the host."""
    return given or os.environ.get(ENV) or configured or default_replica(0).rsplit(":", 1)[0]


def warn_if_alive(ledger_url: str, pipeline: str, replica: str, heartbeat_s: float) -> Optional[str]:
    """A warning when the ledger shows another live server of ``pipeline`` named ``replica``; None otherwise."""
    from ragcost.cost.ledger import Ledger, utcnow
    from ragcost.errors import StoreError

    try:
        led = Ledger(ledger_url, read_only=True)
    except (StoreError, OSError):
        return None  # no ledger yet: nobody else is serving into it
    try:
        lives = led.read_lifetimes(pipeline)
    except Exception:  # a reader's trouble must not stop a server starting; the ledger open will say
        return None
    finally:
        led.close()
    fresh = utcnow() - timedelta(seconds=2 * heartbeat_s)
    host = socket.gethostname()
    for r in lives:
        if r.get("kind") != "serve" or r.get("replica") != replica or r.get("stopped_at") is not None:
            continue
        if r["heartbeat_at"] < fresh or (r.get("host") == host and not _alive(r.get("pid"))):
            continue  # crashed: its last beat is old, or its process is gone
        return (f"warning: serve.replica {replica!r} is already serving {pipeline!r} into this ledger "
                f"(host {r.get('host')}, pid {r.get('pid')}, seen {r['heartbeat_at'].isoformat(timespec='seconds')} UTC); "
                "both servers' rows will be reported as one replica; give each a distinct --replica or serve.replica")
    return None


def _alive(pid: Optional[int]) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def announce(warning: Optional[str]) -> None:
    if warning:
        print(warning, file=sys.stderr, flush=True)
