"""Start uvicorn over the app: one worker in-process, or N workers (PostgreSQL ledger only)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Optional

from ragcost.errors import ConfigError

_ENV = "RAGCOST_SERVE_PIPELINE"
_LEDGER_ENV = "RAGCOST_SERVE_LEDGER"


def check_workers(workers: int, ledger_url: str, store_url: str) -> None:
    """N > 1 processes each open the ledger and the store: DuckDB allows one writing process, so refuse it."""
    if workers <= 1:
        return
    if not ledger_url.startswith("postgresql"):
        raise ConfigError(f"--workers {workers} needs a PostgreSQL ledger (DuckDB allows one writing process); "
                          "pass --ledger postgresql+psycopg://... or use --workers 1")
    if not store_url.startswith("postgresql"):
        raise ConfigError(f"--workers {workers} needs the pipeline's store in PostgreSQL too (DuckDB allows one "
                          "process to open it for writing); set store: postgresql+psycopg://... or use --workers 1")


def check_open(host: str, keys: Optional[str], where: str) -> None:
    """Without keys anyone who can connect may query (and spend): allow that on loopback only."""
    import ipaddress

    if keys is not None or host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(f"{where}: serving on {host} without serve.keys would let anyone query; "
                          "set serve.keys (file:PATH or env:VAR) or bind --host 127.0.0.1")


def app_factory():
    """The app for each of uvicorn's worker processes (``--workers N``): the pipeline comes by env var."""
    from ragcost import process
    from ragcost.serve.app import build_app

    process.own()  # a worker process is the server's, from its start to its exit
    return build_app(os.environ[_ENV], os.environ.get(_LEDGER_ENV) or None, warm_first=True)


def serve(pipeline: Path, host: str = "127.0.0.1", port: int = 8080, workers: int = 1,
          ledger_url: Optional[str] = None, log_level: str = "info", replica: Optional[str] = None) -> None:
    """Run until SIGTERM/SIGINT: stop accepting, finish the requests in flight, flush the ledger, exit 0."""
    import uvicorn

    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(pipeline)
    check_workers(workers, ledger_url or pipe.config.store_url, pipe.config.store_url)
    check_open(host, pipe.config.serve.keys, pipe.loaded.where(["serve"]))
    from ragcost.serve import replica as rep
    from ragcost.serve.lifetime import heartbeat_s

    name = rep.check_replica(replica) if replica else (pipe.config.serve.replica or rep.default_replica(port))
    os.environ[rep.ENV] = name  # this process's app and every --workers process: one replica
    rep.announce(rep.warn_if_alive(ledger_url or pipe.config.store_url, pipe.config.name, name, heartbeat_s()))
    # uvicorn drains on SIGTERM, then re-raises the signal it caught; a handler of ours absorbs
    # that re-raise, so a drained server exits 0 (what process managers expect of a clean stop).
    signal.signal(signal.SIGTERM, lambda *_: None)
    from ragcost.serve.protocol import ENV as HEADER_ENV
    from ragcost.serve.protocol import protocol_path

    cfg = pipe.config.serve
    os.environ[HEADER_ENV] = str(cfg.header_timeout_s)
    # SIGTERM: stop accepting, give the requests in flight serve.drain_s, then close what is left
    # (a slow client cannot hold the exit: its body has serve.body_timeout_s, its headers header_timeout_s).
    common = dict(host=host, port=port, log_level=log_level, timeout_graceful_shutdown=cfg.drain_s,
                  http=protocol_path(cfg.http))
    if workers == 1:
        from ragcost.serve.app import build_app

        uvicorn.run(build_app(pipeline, ledger_url, replica=name), **common)
        return
    os.environ[_ENV] = str(Path(pipeline).resolve())
    if ledger_url:
        os.environ[_LEDGER_ENV] = ledger_url
    uvicorn.run("ragcost.serve.run:app_factory", factory=True, workers=workers, **common)
