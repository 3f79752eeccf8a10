"""Terminal and JSON views of a query run."""

from __future__ import annotations

from typing import Any, Optional

from ragcost.cli.text import plain, terminal_safe
from ragcost.cost.fmt import money_column
from ragcost.runtime.query import QueryRun


def _usd(x: float) -> str:
    if x != x or x in (float("inf"), float("-inf")):
        return "n/a"
    return f"${x:.8f}" if x < 0.01 else f"${x:.4f}"


NO_USEFUL = "n/a (0 useful)"


def _ms(x: float) -> str:
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def _per_useful(x: Optional[float]) -> str:
    return NO_USEFUL if x is None else _usd(x)


def _snippet(text: str, n: int = 140) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 1] + "…"


def print_results(run: QueryRun, show_hits: bool = True, streamed: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    if show_hits:
        for s in run.states:
            if s.truncated:
                console.print(Text.assemble(("note: ", "yellow"), plain(s.truncated)))
            t = Table(title=plain(s.text), title_justify="left", show_lines=False)
            t.add_column("#", justify="right")
            t.add_column("title")
            t.add_column("score", justify="right")
            t.add_column("snippet")
            for i, h in enumerate(s.hits, 1):
                t.add_row(str(i), plain(h.title or h.doc_id), f"{h.score:.3f}", plain(_snippet(terminal_safe(h.passage))))
            console.print(t)
            extra = f", {s.matches} chunks match the filter" if s.matches is not None else ""
            console.print(plain(f"retrieval strategy: {s.strategy or '-'}{extra}; {len(s.hits)} results"))
            if s.partial:
                p = s.partial
                console.print(Text.assemble(("partial: ", "red"), plain(f"shard(s) {p['missing_shards']} of {p['shards']} "
                                            "did not answer; these results are from the others")))
            if s.routes:  # a route stage chose the generate target: say which, and why
                f = s.route_fields()
                console.print(plain(f"route: {f['route_path']} ({f['route_reason']})"))
            _print_answer(console, s, streamed)
    from ragcost.cost.report import FittedTable

    stats = run.stage_stats()
    n_useful = run.useful_total
    # One notation per column (scientific when small), so a tiny guard call never reads as $0.00000000.
    usd = money_column([s.cost_usd for s in stats] + [run.storage_usd, run.total_usd])
    per = money_column([s.usd_per_useful for s in stats] + [run.storage_usd_per_useful, run.usd_per_useful], missing=NO_USEFUL)
    cells = [[plain(s.stage), plain(s.resource), str(s.calls), str(s.items), _ms(s.pct_ms(50)), _ms(s.pct_ms(95)),
              usd[i], _n(s.useful), per[i]] for i, s in enumerate(stats)]
    cells.append(["index storage", "storage", "-", str(len(run.states)), "-", "-", usd[-2], _n(n_useful), per[-2]])
    cells.append(["total", "", "", "", "", "", usd[-1], _n(n_useful), per[-1]])
    headers = ["stage", "resource", "calls", "items", "p50 ms", "p95 ms", "$", "useful", "$/useful"]
    if len(run.states) == 1:  # one query: every call served one item, so the column says nothing
        headers.pop(3)
        cells = [row[:3] + row[4:] for row in cells]
    st = FittedTable(headers, cells, simple=True, names=2, title=plain(f"stages ({len(run.states)} queries, price book {run.price_book_version})"),
                     title_justify="left")
    console.print(st)
    from ragcost.generate.summary import summary_line, timing_summary

    for stage, g in timing_summary(run.calls).items():
        console.print(plain(summary_line(stage, g)), highlight=False)
    n = max(len(run.states), 1)
    console.print(f"$ per query {_usd(run.total_usd / n)}  ·  $ per 1k queries {_usd(run.total_usd / n * 1000)}", highlight=False)
    console.print(f"$ per useful document {_per_useful(run.usd_per_useful)}  ·  {plain(_judge_line(run))}", highlight=False)
    if run.book is not None:
        full, how = run.declared_traffic(run.book)
        per_useful = full * n / run.useful_total if run.useful_total else None
        console.print(plain(f"fully loaded at the book's declared traffic ({run.book.queries_per_month:,} queries/month; "
                            f"{'; '.join(how) or 'no time-priced resource'}): $ per query {_usd(full)}  ·  "
                            f"$ per useful document {_per_useful(per_useful)}"), highlight=False)
        console.print("  (the figures above are marginal: busy time only. `ragcost report` gives what was provisioned)",
                      highlight=False)


def _n(x: float) -> str:
    """A useful count: whole for counting judges, three decimals for the expected-useful judge's sums."""
    return str(int(x)) if float(x).is_integer() else f"{x:.3f}"


def _judge_line(run: QueryRun) -> str:
    what = "expected useful" if run.judge.startswith("calibrated") else "useful"
    return f"{_n(run.useful_total)} {what} by judge {run.judge}" if run.judge else f"{_n(run.useful_total)} useful"


def _print_answer(console, s, streamed: bool) -> None:
    from rich.text import Text

    if s.error:
        console.print(Text.assemble(("error: ", "red"), plain(s.error)), highlight=False)
    if s.answer is None:
        return
    if not streamed:
        console.print(Text.assemble(("answer: ", "bold"), plain(s.answer)), highlight=False)
    titles = {h.doc_id: h.title or h.doc_id for h in s.hits}
    cites = ", ".join(f"{d} ({titles.get(d, '?')})" for d in s.citations) or "none"
    console.print(plain(f"citations: {cites}"), highlight=False)


def results_json(run: QueryRun) -> dict[str, Any]:
    from ragcost.generate.summary import timing_summary

    return {
        "pipeline": run.pipeline,
        "price_book": run.price_book_version,
        "queries": [
            {
                "id": s.id,
                "text": s.text,
                "strategy": s.strategy,
                "matches": s.matches,
                "partial": s.partial,
                "cache": s.cache_view(),
                "notes": {k: v for k, v in s.facts().items() if k not in ("strategy", "matches")},
                "answer": s.answer,
                "citations": s.citations,
                "error": s.error,
                "latency_ms": round(run.latency_s(s) * 1000, 3),
                "useful": n_useful,
                "useful_judge": run.judge,
                "abstained": bool(s.generation.get("abstained")),
                "hits": [{"doc_id": h.doc_id, "title": h.title, "score": h.score, "chunk_no": h.chunk_no, "text": h.text, "metadata": h.metadata} for h in s.hits],
            }
            for s, n_useful in zip(run.states, run.useful or [0] * len(run.states))
        ],
        "stages": [
            {"stage": s.stage, "resource": s.resource, "calls": s.calls, "items": s.items, "p50_ms": s.pct_ms(50), "p95_ms": s.pct_ms(95),
             "p99_ms": s.pct_ms(99), "usd": s.cost_usd, "useful": s.useful, "usd_per_useful": s.usd_per_useful, "notes": s.notes}
            for s in run.stage_stats()
        ],
        "generation": timing_summary(run.calls),
        "storage_usd": run.storage_usd,
        "storage_usd_per_useful": run.storage_usd_per_useful,
        "total_usd": run.total_usd,
        "usd_per_query": run.total_usd / max(len(run.states), 1),
        "useful": run.useful_total,
        "useful_judge": run.judge,
        "usd_per_useful": run.usd_per_useful,  # null: no useful document was delivered
        **_declared(run),
    }


def _declared(run: QueryRun) -> dict[str, Any]:
    """The fully loaded figure at the book's declared traffic, labelled as such."""
    if run.book is None:
        return {}
    full, how = run.declared_traffic(run.book)
    n = max(len(run.states), 1)
    return {"fully_loaded": {"basis": f"declared traffic ({run.book.queries_per_month} queries/month)",
                             "usd_per_query": full, "usd_per_useful": full * n / run.useful_total if run.useful_total else None,
                             "capacity": how}}
