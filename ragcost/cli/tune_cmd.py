"""`ragcost tune SPEC --floor 0.98 [--write]`: the cheapest configuration above a quality floor."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ragcost.cli.query_cmd import in_range
from ragcost.cli.text import markup_safe as _m


def _money(v: Optional[float]) -> str:
    return "n/a (0 useful)" if v is None else f"${v:.3g}"


def tune(
    spec: Path = typer.Argument(..., help="eval spec YAML (eval/*.yaml): the grid to search"),
    floor: Optional[float] = typer.Option(None, "--floor", help="keep configurations with quality >= floor x the best measured; default: the spec's within_pct (2% -> 0.98), eval's rule"),
    write: bool = typer.Option(False, "--write", help="write the chosen configuration into the pipeline YAML, with comments"),
    max_queries: Optional[int] = typer.Option(None, "--max-queries", callback=in_range(1, 10**9, "the number of judged queries to evaluate"), help="evaluate only the first N judged queries (N >= 1)"),
    cache_dir: Path = typer.Option(Path(".ragcost/eval"), "--cache-dir", help="where corpus and query vectors are cached"),
    traffic: Optional[str] = typer.Option(None, "--traffic", metavar="one|serve|N", help="the traffic the $ are priced at, as eval's --traffic: one (a query at a time), serve (the batch serve's window forms) or N (batches of N); default: serve when the pipeline sets serve.batch_window_ms, else one. tune picks what eval picks at the same traffic"),
) -> None:
    """Find eval's pick (the cheapest configuration by $ per useful document within the floor) without the full grid."""
    from rich.console import Console

    from ragcost.cli.eval_cmd import _progress_runner
    from ragcost.evaluate.spec import load_spec
    from ragcost.evaluate.tune import summary_lines, tune as run_tune

    out = Console(width=None if sys.stdout.isatty() else 220, soft_wrap=not sys.stdout.isatty())  # a file gets whole lines
    ls = load_spec(spec)
    if max_queries is not None:
        ls.spec.max_queries = max_queries
    if write:  # before the run: a file --write could not edit must not cost the whole evaluation
        from ragcost.atomic import check_editable

        check_editable(ls.pipeline_path)
    cb, bar = _progress_runner(Console(stderr=True, soft_wrap=True))
    with bar:
        rep = run_tune(ls, floor, cache_dir, progress=cb, traffic=traffic)
    for line in summary_lines(rep):
        out.print(_m(line), highlight=False)
    out.print(f"ran {rep.ran} of the full grid's {rep.full_grid} configurations", highlight=False)
    c, b = rep.chosen, rep.baseline
    if c is None:
        out.print("no configuration reached the floor (every one measured has no useful document)", highlight=False)
        raise typer.Exit(1)
    q = rep.quality
    ci = f" [{c.ci[q][0]:.4f}, {c.ci[q][1]:.4f}]" if q in c.ci else ""
    out.print(f"chosen: [bold]{_m(c.name)}[/] — {q} {c.quality(q):.4f}{ci} ({c.quality(q) / rep.best_quality:.1%} of the best), "
              f"{_money(c.usd_per_useful)} per useful document, p95 {c.p95_ms:.2f} ms, {c.bytes_per_vector:,.0f} B/vector",
              highlight=False)
    if rep.best is not None and rep.best is not c and rep.resampler is not None:
        from ragcost.evaluate.intervals import versus_line

        out.print(f"  vs the best {_m(rep.best.name)}: {_m(versus_line(c, rep.best, q, rep.resampler))}", highlight=False)
    if b is not None:
        saved = rep.savings()
        out.print(f"pipeline's current configuration: {_m(b.name)} — {q} {b.quality(q):.4f}, {_money(b.usd_per_useful)} "
                  f"per useful document; " + ("savings n/a" if saved is None else f"saves {saved:.1%} per useful document"),
                  highlight=False)
    if write:
        from ragcost.evaluate.tune_write import write_choice

        note = f"{q} {c.quality(q):.4f}, {_money(c.usd_per_useful)}/useful (floor {rep.floor:g} x best {rep.best_quality:.4f})"
        changed = write_choice(ls.pipeline_path, c, note)
        out.print(f"wrote {_m(str(ls.pipeline_path))} ({', '.join(changed) or 'no value changed'})", highlight=False)
