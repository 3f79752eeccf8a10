"""`ragcost query PIPELINE "text" [--filter JSON] [-k N] [--json]` and `--queries FILE` for a batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from ragcost.errors import IngestError, StoreError
from ragcost.runtime.request import MAX_K, check_text as check_query_text


def _read_queries(path: Path) -> list[tuple[str, str]]:
    """Queries from a .jsonl file ({"_id"|"id", "text"}) or a text file (one query per line).

    Lines are split on \\n only and decoded one at a time, so a bad line is named by file:line.
    """
    if not path.is_file():
        raise IngestError(f"--queries: file not found: {path}")
    out = []
    offset = 0
    line_of: dict[str, int] = {}  # each query's id -> its line: an id twice would merge two queries' rows by id
    for n, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as e:
            raise IngestError(
                f"{path}:{n}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte offset {offset + e.start}); save the file as UTF-8"
            ) from None
        offset += len(raw) + 1
        if not line:
            continue
        if path.suffix == ".jsonl":
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise IngestError(f"{path}:{n}: not valid JSON ({e.msg}); each line must be {{\"_id\": ..., \"text\": ...}}") from None
            if not isinstance(obj, dict) or "text" not in obj:
                raise IngestError(f"{path}:{n}: a query line needs a \"text\" field")
            if not isinstance(obj["text"], str):
                raise IngestError(f"{path}:{n}: \"text\" must be a string, not {json.dumps(obj['text'])[:40]}")
            qid = str(obj.get("_id", obj.get("id", n)))
            if qid in line_of:
                raise IngestError(f"{path}:{n}: _id {json.dumps(qid)[:60]} is also on line {line_of[qid]}; give each query "
                                  "its own _id (or leave _id out: the line number is used)")
            line_of[qid] = n
            out.append((qid, check_query_text(obj["text"], f"{path}:{n}")))
        else:
            out.append((str(n), check_query_text(line, f"{path}:{n}")))
    if not out:
        raise IngestError(f"{path}: no queries in the file; write one query per line")
    return out


def require_store(url: str, pipeline: Path) -> None:
    """Refuse to run against an embedded store file that does not exist: opening it would create an empty one."""
    from ragcost.cli.paths import embedded_path

    path = embedded_path(url)
    if path is not None and not path.is_file():
        from ragcost.runtime.load import no_store_message

        raise StoreError(no_store_message(path, pipeline))


def in_range(low: int, high: int, what: str):
    """A typer callback refusing a number outside [low, high] with a usage error that gives the range."""

    def check(value: Optional[int]) -> Optional[int]:
        if value is not None and not low <= value <= high:
            raise typer.BadParameter(f"{value} is out of range: give {what}, from {low} to {high}")
        return value

    return check


def query(
    pipeline: Path = typer.Argument(..., help="pipeline YAML"),
    text: Optional[str] = typer.Argument(None, help="the question"),
    filter_: Optional[str] = typer.Option(None, "--filter", help='metadata filter as JSON, e.g. {"year": {"$gte": 2023}}'),
    k: Optional[int] = typer.Option(None, "-k", callback=in_range(1, MAX_K, "results per query"), help="results per query, 1-10000 (default: what the pipeline's stages keep)"),
    queries: Optional[Path] = typer.Option(None, "--queries", help="a .jsonl or .txt file of queries to run as batches"),
    batch_size: int = typer.Option(32, "--batch-size", callback=in_range(1, 100_000, "queries per batch"), help="queries per batch with --queries, 1-100000"),
    as_json: bool = typer.Option(False, "--json", help="print results and costs as JSON"),
    ledger: Optional[str] = typer.Option(None, "--ledger", help="SQLAlchemy URL for the ledger (default: the pipeline's store)"),
    no_ledger: bool = typer.Option(False, "--no-ledger", help="do not record this run in the ledger"),
    profile: bool = typer.Option(False, "--profile", help="print where the process's time went, phase by phase (wall and CPU "
                                 "seconds, the packages each phase imported), on stderr after the results"),
) -> None:
    """Answer one query (or a file of them) and print results with the per-stage cost table."""
    from contextlib import nullcontext

    from ragcost.errors import ConfigError
    from ragcost.runtime.profile import Profile

    prof = Profile() if profile else None
    if prof:
        prof.since_start("start-up: interpreter, ragcost's CLI")
    phase = prof.phase if prof else (lambda _name: nullcontext())
    with phase("imports: pipeline, query runner, output"):
        from ragcost.runtime.pipeline import Pipeline
        from ragcost.runtime.query import run_queries
        from ragcost.cli.render import print_results, results_json

    if (text is None) == (queries is None):
        raise ConfigError('give either a query text or --queries FILE (e.g. ragcost query pipelines/quickstart.yaml "what is a decorator?")')
    items = _read_queries(queries) if queries else [("q1", check_query_text(text, "the query text"))]
    with phase("read the pipeline, price book and store"):
        pipe = Pipeline.load(pipeline)
        require_store(pipe.config.store_url, pipeline)
    stream, show = _stream_to_terminal(pipe) if not as_json and queries is None else (None, None)
    try:
        if prof:  # each stage's warm-up on its own line (run_queries then finds them warm)
            for st in pipe.stages():
                with phase(f"warm up {st.name}"):
                    st.warm_up()
        with phase(f"{len(items)} quer{'y' if len(items) == 1 else 'ies'}, ledger write included"):
            run = run_queries(pipe, items, filter_=filter_, k=k, batch_size=batch_size, ledger_url=ledger, write_ledger=not no_ledger,
                              on_event=show)
    finally:
        pipe.close()
    with phase("print the results"):
        if as_json:
            from ragcost.cli.text import dumps

            typer.echo(dumps(results_json(run)))
        else:
            streamed = bool(stream and stream["started"])
            if streamed:
                typer.echo("")
            print_results(run, show_hits=queries is None, streamed=streamed)
    if prof:
        for line in prof.lines():
            typer.echo(line, err=True)


def _stream_to_terminal(pipe) -> tuple[dict, Any]:
    """Print a single query's answer as the generate stage streams it; retries and fallbacks on stderr.

    ``answer: `` is printed with the first text, so a query refused or failed before any text leaves no empty
    ``answer:`` line on stdout; returns ``{"started": bool}``, which says whether any text was streamed, and the
    event handler for the query run (None when the pipeline generates nothing)."""
    gens = [s for s in pipe.stages() if s.makes_answer]
    state = {"started": False}

    def show(_query, kind: str, text: str) -> None:
        from ragcost.cli.text import terminal_safe

        if kind == "sources":
            return
        if kind == "text":
            if not state["started"]:
                state["started"] = True
                typer.echo("answer: ", nl=False)
            typer.echo(terminal_safe(text), nl=False)
        else:
            typer.echo(f"\n[{kind}] {terminal_safe(text, one_line=True)}", err=True)

    return state, (show if gens else None)
