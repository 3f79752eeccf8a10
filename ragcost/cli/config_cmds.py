"""`ragcost validate` and `ragcost schema`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ragcost.urls import shown_url


def validate(
    pipeline: Path = typer.Argument(..., help="pipeline YAML"),
    deep: bool = typer.Option(False, "--deep", help="also re-hash every file of the built index against its checksum"),
) -> None:
    """Check a pipeline, the index and price files it names, and its built index as `query` would, without running anything."""
    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(pipeline)
    pipe.check()
    try:
        manifest = pipe.check_index(deep=deep)  # what `query` would refuse, refused here: no index, stale, damaged
        if pipe.config.useful.judge == "calibrated":
            pipe.calibration  # noqa: B018 - loaded and checked against this pipeline (dim, model, index) as `query` would
    finally:
        pipe.close()
    ic = pipe.index_config
    stages = ", ".join(["embed"] + [s.type for s in pipe.config.stages])
    from ragcost.cli.text import terminal_safe

    if manifest is None:
        built = f"not indexed yet: run `ragcost index {pipeline}` before `ragcost query`"
    else:
        how = "every file re-hashed" if deep else "sizes, headers and fingerprint checked"
        built = f"index built with {manifest.vector_count} vectors, up to date ({how})"
    typer.echo(terminal_safe(
        f"{pipeline}: ok — store {shown_url(pipe.config.store_url)}; index {ic.backend}/{ic.kind} build {ic.build} search {ic.search}; "
        f"stages {stages}; price book {pipe.price_book_path} ({pipe.price_book.version}); {built}"
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
