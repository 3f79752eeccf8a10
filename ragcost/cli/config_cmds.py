"""`ragcost validate` and `ragcost schema`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def validate(
    pipeline: Path = typer.Argument(..., help="pipeline YAML"),
    deep: bool = typer.Option(False, "--deep", help="also verify the built index's files against their checksums"),
) -> None:
    """Check a pipeline and the index and price files it names, without running anything."""
    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(pipeline)
    pipe.check()
    if deep:
        from ragcost.index import verify_artifact

        verify_artifact(pipe.config.index_path, deep=True, rebuild_hint=pipe.rebuild_hint())
    ic = pipe.index_config
    stages = ", ".join(["embed"] + [s.type for s in pipe.config.stages])
    from ragcost.cli.text import terminal_safe

    typer.echo(terminal_safe(
        f"{pipeline}: ok — store {pipe.config.store_url}; index {ic.backend}/{ic.kind} build {ic.build} search {ic.search}; "
        f"stages {stages}; price book {pipe.price_book_path} ({pipe.price_book.version})"
    ))


def schema(
    kind: str = typer.Argument("pipeline", help="pipeline | index | pricing"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="write to a file instead of stdout"),
) -> None:
    """Print the JSON Schema of a YAML file kind, for editor autocompletion."""
    from ragcost.runtime.schema import json_schema

    text = json.dumps(json_schema(kind), indent=2)
    if out:
        try:
            out.write_text(text + "\n", encoding="utf-8")
        except OSError as e:
            from ragcost.errors import ConfigError

            raise ConfigError(f"--out {out}: cannot write ({e.strerror or type(e).__name__}); give a path in an existing, writable folder") from None
        typer.echo(f"wrote {out}")
    else:
        typer.echo(text)
