"""`ragcost judgments pool SPEC -o FILE` and `ragcost judgments merge SPEC FILE`: relevance judgments a team makes itself."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ragcost.cli.text import markup_safe as _m

app = typer.Typer(help="Relevance judgments for your own questions: pool every configuration's top k into a file to "
                       "judge, then merge the judged file into the dataset's qrels.", no_args_is_help=True)


@app.command("pool")
def pool_(
    spec: Path = typer.Argument(..., help="eval spec YAML: its dataset (corpus.jsonl, queries.jsonl; qrels.tsv optional) and grid"),
    out: Path = typer.Option(Path("judging.tsv"), "-o", "--out", help="the judging file to write (tab-separated; opens in any spreadsheet)"),
    k: Optional[int] = typer.Option(None, "--k", min=1, max=1000, help="documents per configuration and question (default: the spec's first k)"),
    cache_dir: Path = typer.Option(Path(".ragcost/eval"), "--cache-dir", help="where corpus and query vectors are cached (eval's)"),
    seed: int = typer.Option(0, "--seed", min=0, help="the seed of each question's document order"),
) -> None:
    """Pool the top k of every grid configuration for every question into a file a person judges."""
    from rich.console import Console
    from rich.table import Table

    from ragcost.cli.eval_cmd import _progress_runner
    from ragcost.evaluate.pool import judged_at, pool, read_existing, write_pool
    from ragcost.evaluate.spec import load_spec

    ls = load_spec(spec)
    err = Console(stderr=True, soft_wrap=True)
    cb, bar = _progress_runner(err)
    with bar:
        p = pool(ls, cache_dir, k, progress=cb)
    todo = write_pool(p, ls.dataset_path, out, seed)
    console = Console(width=None if sys.stdout.isatty() else 160)
    for s in p.skipped:
        err.print(f"[yellow]not pooled:[/] {_m(s)}", highlight=False)
    qrels = read_existing(ls.dataset_path)
    title = f"judged@{p.k}: the share of each configuration's top {p.k} that carries a judgment"
    t = Table(title=title, header_style="bold", min_width=len(title))
    t.add_column("config")
    t.add_column(f"judged@{p.k}", justify="right")
    for name, tops in p.tops.items():
        t.add_row(_m(name), f"{judged_at(tops, qrels, p.k):.0%}")
    console.print(t)
    console.print(f"wrote {p.pairs:,} question-document pairs from {len(p.tops)} configurations and {len(p.queries)} "
                  f"questions to {_m(str(out))}: {todo:,} to judge ({p.pairs - todo:,} already in the qrels). Fill "
                  f"relevance (0-3) and judge, then: ragcost judgments merge {_m(str(spec))} {_m(str(out))}", highlight=False,
                  soft_wrap=True)


@app.command("merge")
def merge_(
    spec: Path = typer.Argument(..., help="eval spec YAML whose dataset receives the judgments"),
    file: Path = typer.Argument(..., help="the judging file, filled in (tab-separated, as `judgments pool` wrote it)"),
    judge: Optional[str] = typer.Option(None, "--judge", help="who judged the rows whose judge cell is empty"),
) -> None:
    """Write a judged file's judgments into the dataset's qrels, and who judged what into judgments.tsv beside it."""
    from rich.console import Console

    from ragcost.evaluate.pool import merge
    from ragcost.evaluate.spec import load_spec

    ls = load_spec(spec)
    m = merge(ls.dataset_path, file, judge)
    who = ", ".join(f"{j} {n}" for j, n in sorted(m.judges.items())) or "nobody new"
    Console(width=None if sys.stdout.isatty() else 160).print(
        f"merged {_m(str(file))}: {m.added:,} new judgments, {m.changed:,} changed, {m.unchanged:,} unchanged, "
        f"{m.empty:,} not judged yet (by {_m(who)}); qrels in {_m(str(m.qrels))}, who judged what in {_m(str(m.log))}",
        highlight=False, soft_wrap=True)
