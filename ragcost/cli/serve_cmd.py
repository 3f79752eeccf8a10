"""`ragcost serve PIPELINE [--host] [--port] [--workers N] [--ledger URL] [--replica NAME]`: the pipeline as an HTTP service."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def serve(
    pipeline: Path = typer.Argument(..., help="pipeline YAML (its serve: block sets batching, limits and keys)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (loopback by default)"),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="port to listen on"),
    workers: int = typer.Option(1, "--workers", min=1, max=256, help="worker processes; more than 1 needs a PostgreSQL ledger"),
    ledger: Optional[str] = typer.Option(None, "--ledger", help="SQLAlchemy URL for the ledger (default: the pipeline's store)"),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level"),
    replica: Optional[str] = typer.Option(None, "--replica", help="this server's name among replicas sharing the ledger "
                                          "(ledger rows, /metrics label); default serve.replica, else host:port"),
) -> None:
    """Serve POST /v1/query and OpenAI-compatible /v1/chat/completions, with /healthz, /readyz and /metrics."""
    from ragcost.cli.query_cmd import require_store
    from ragcost.runtime.pipeline import Pipeline

    require_store(Pipeline.load(pipeline).config.store_url, pipeline)
    try:
        from ragcost.serve.run import serve as run
    except ImportError as e:
        from ragcost.errors import ConfigError

        raise ConfigError(f"ragcost serve needs {e.name}; pip install 'ragcost[serve]'") from None
    run(pipeline, host=host, port=port, workers=workers, ledger_url=ledger, log_level=log_level, replica=replica)
