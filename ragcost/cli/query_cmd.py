"""`ragcost query PIPELINE "text" [--filter JSON] [-k N] [--json]` and `--queries FILE` for a batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ragcost.errors import IngestError


def _read_queries(path: Path) -> list[tuple[str, str]]:
    """Queries from a .jsonl file ({"_id"|"id", "text"}) or a text file (one query per line)."""
    if not path.is_file():
        raise IngestError(f"--queries: file not found: {path}")
    out = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            if path.suffix == ".jsonl":
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise IngestError(f"{path}:{n}: not valid JSON ({e.msg}); each line must be {{\"_id\": ..., \"text\": ...}}") from None
                if not isinstance(obj, dict) or "text" not in obj:
                    raise IngestError(f"{path}:{n}: a query line needs a \"text\" field")
                out.append((str(obj.get("_id", obj.get("id", n))), str(obj["text"])))
            else:
                out.append((str(n), line))
    return out


def query(
    pipeline: Path = typer.Argument(..., help="pipeline YAML"),
    text: Optional[str] = typer.Argument(None, help="the question"),
    filter_: Optional[str] = typer.Option(None, "--filter", help='metadata filter as JSON, e.g. {"year": {"$gte": 2023}}'),
    k: Optional[int] = typer.Option(None, "-k", help="results per query (default: the retrieve stage's k)"),
    queries: Optional[Path] = typer.Option(None, "--queries", help="a .jsonl or .txt file of queries to run as batches"),
    batch_size: int = typer.Option(32, "--batch-size", help="queries per batch with --queries"),
    as_json: bool = typer.Option(False, "--json", help="print results and costs as JSON"),
    ledger: Optional[str] = typer.Option(None, "--ledger", help="SQLAlchemy URL for the ledger (default: the pipeline's store)"),
    no_ledger: bool = typer.Option(False, "--no-ledger", help="do not record this run in the ledger"),
) -> None:
    """Answer one query (or a file of them) and print results with the per-stage cost table."""
    from ragcost.errors import ConfigError
    from ragcost.runtime.pipeline import Pipeline
    from ragcost.runtime.query import run_queries
    from ragcost.cli.render import print_results, results_json

    if (text is None) == (queries is None):
        raise ConfigError('give either a query text or --queries FILE (e.g. ragcost query pipelines/quickstart.yaml "what is a decorator?")')
    items = _read_queries(queries) if queries else [("q1", text)]
    pipe = Pipeline.load(pipeline)
    streamed = not as_json and queries is None and _stream_to_terminal(pipe)
    try:
        run = run_queries(pipe, items, filter_=filter_, k=k, batch_size=batch_size, ledger_url=ledger, write_ledger=not no_ledger)
    finally:
        pipe.close()
    if as_json:
        typer.echo(json.dumps(results_json(run), indent=2))
    else:
        if streamed:
            typer.echo("")
        print_results(run, show_hits=queries is None, streamed=streamed)


def _stream_to_terminal(pipe) -> bool:
    """Print a single query's answer as the generate stage streams it; retries and fallbacks on stderr."""
    gens = [s for s in pipe.stages() if s.type == "generate"]

    def show(state, kind: str, text: str) -> None:
        if kind == "text":
            typer.echo(text, nl=False)
        else:
            typer.echo(f"\n[{kind}] {text}", err=True)

    for g in gens:
        g.on_event = show
    if gens:
        typer.echo("answer: ", nl=False)
    return bool(gens)
