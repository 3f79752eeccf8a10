"""`ragcost cache stats|clear|prune PIPELINE`: what the answer cache holds, and removing it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

app = typer.Typer(help="The answer cache of a pipeline's cache stage: stats, clear, prune.", no_args_is_help=True)


def _open(pipeline: Path, stage: str):
    from ragcost.errors import ConfigError
    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(pipeline)
    found = next((s for s in pipe.stages() if s.type == "cache" and s.name == stage), None)
    if found is None:
        raise ConfigError(f"{pipeline}: no cache stage named {stage!r}; add {{type: cache}} before retrieve, or pass --stage")
    found.warm_up()
    return pipe, found.handle


@app.command("stats")
def stats(pipeline: Path = typer.Argument(..., help="pipeline YAML"),
          stage: str = typer.Option("cache", "--stage", help="the cache stage's name")) -> None:
    """Entries (live, and stale: expired or made under other versions), bytes, hits and the verified false-hit rate."""
    pipe, h = _open(pipeline, stage)
    try:
        out = h.backend.stats(time.time(), h.version)
        out.update({"backend": h.params.backend, "max_false_hit_rate": h.params.max_false_hit_rate,
                    "confidence": h.params.confidence})
        typer.echo(json.dumps(out, indent=2))
    finally:
        h.backend.close()
        pipe.close()


@app.command("clear")
def clear(pipeline: Path = typer.Argument(..., help="pipeline YAML"),
          stage: str = typer.Option("cache", "--stage", help="the cache stage's name")) -> None:
    """Remove every entry and every verified observation."""
    pipe, h = _open(pipeline, stage)
    try:
        typer.echo(f"removed {h.backend.clear()} entries")
    finally:
        h.backend.close()
        pipe.close()


@app.command("prune")
def prune(pipeline: Path = typer.Argument(..., help="pipeline YAML"),
          stage: str = typer.Option("cache", "--stage", help="the cache stage's name")) -> None:
    """Remove expired entries and those made under other versions (model, index, corpus, stages): unreachable anyway."""
    pipe, h = _open(pipeline, stage)
    try:
        typer.echo(f"removed {h.backend.prune(time.time(), h.version)} stale entries")
    finally:
        h.backend.close()
        pipe.close()
