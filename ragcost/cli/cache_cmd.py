"""`ragcost cache stats|clear|prune PIPELINE`: what the answer cache holds, and removing it.

None of them creates a store: on a pipeline whose DuckDB cache file does not exist they say so.
A bad entry (unreadable, incomplete, checksum mismatch) is counted by ``stats`` and removed by ``prune``.
``stats`` adds, when the pipeline's ledger exists, the cache's value over the ledger's whole window: the
block ``ragcost report`` prints (:func:`ragcost.cli.report.cache_value`), hits by tier included.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

import typer

app = typer.Typer(help="The answer cache of a pipeline's cache stage: stats, clear, prune.", no_args_is_help=True)


@contextmanager
def _opened(pipeline: Path, stage: str):
    """(stage, backend or None when there is no cache store yet, pipeline), closed afterwards."""
    from ragcost.errors import ConfigError
    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(pipeline)
    backend = None
    try:
        found = next((s for s in pipe.stages() if hasattr(s, "admin_backend") and s.name == stage), None)
        if found is None:
            raise ConfigError(f"{pipeline}: no cache stage named {stage!r}; add {{type: cache}} before retrieve, or pass --stage")
        backend = found.admin_backend(pipe.config.store_url, pipe.config.name)
        yield found, backend, pipe
    finally:
        if backend is not None:
            backend.close()
        pipe.close()


def _none_yet(pipeline: Path, found) -> str:
    return f"no cache store yet for {pipeline} (stage {found.name!r}): nothing to remove"


@app.command("stats")
def stats(pipeline: Path = typer.Argument(..., help="pipeline YAML"),
          stage: str = typer.Option("cache", "--stage", help="the cache stage's name")) -> None:
    """Entries (live; stale: expired or made under other versions; bad), bytes, hits and the verified false-hit rate;
    with the pipeline's ledger, hits by tier and the cache's value over its whole window (as `ragcost report`)."""
    with _opened(pipeline, stage) as (found, backend, pipe):
        if backend is None:
            from ragcost.cache.backends import summarise

            out = {**summarise([], [], time.time(), None), "store": "none yet"}
        else:
            out = backend.stats(time.time(), found.live_version())
        out.update({"backend": found.params.backend, "max_false_hit_rate": found.params.max_false_hit_rate,
                    "confidence": found.params.confidence})
        ledger, name, book = pipe.config.store_url, pipe.config.name, pipe.price_book_path
    out.update(_value(ledger, name, book, stage))  # the cache store closed first: it may be the ledger's own file
    typer.echo(json.dumps(out, indent=2))


def _value(url: str, pipeline: str, book: Path, stage: str) -> dict:
    """Hits by tier and the cache's value from the ledger, this pipeline's queries at this stage; a note without one."""
    from ragcost.cache.savings import cache_column
    from ragcost.cli.report import _require_ledger, cache_value
    from ragcost.cost.ledger import Ledger
    from ragcost.errors import StoreError

    try:
        _require_ledger(url)
    except StoreError as e:
        return {"hits_by_tier": None, "value": None, "value_note": str(e)}
    with Ledger(url, read_only=True) as led:
        qrows, srows = led.read(None, pipeline)
    qrows = [q for q in qrows if (cache_column(q.get("cache")) or {}).get("stage") == stage]
    value = cache_value(url, qrows, srows, book)
    if value is None:
        return {"hits_by_tier": None, "value": None, "value_note": f"no query in the ledger met cache stage {stage!r}"}
    return {"hits_by_tier": value["hits_by_tier"], "value": value}


@app.command("clear")
def clear(pipeline: Path = typer.Argument(..., help="pipeline YAML"),
          stage: str = typer.Option("cache", "--stage", help="the cache stage's name")) -> None:
    """Remove every entry and every verified observation."""
    with _opened(pipeline, stage) as (found, backend, _):
        typer.echo(_none_yet(pipeline, found) if backend is None else f"removed {backend.clear()} entries")


@app.command("prune")
def prune(pipeline: Path = typer.Argument(..., help="pipeline YAML"),
          stage: str = typer.Option("cache", "--stage", help="the cache stage's name")) -> None:
    """Remove expired entries, those made under other versions (model, index, corpus, stages) and bad ones."""
    with _opened(pipeline, stage) as (found, backend, _):
        if backend is None:
            typer.echo(_none_yet(pipeline, found))
            return
        n = backend.prune(time.time(), found.live_version())
        bad = len(backend.bad)
        typer.echo(f"removed {n - bad} stale entries" + (f" and {bad} bad ones" if bad else ""))
