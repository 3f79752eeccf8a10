"""The cost report over ledger rows: per stage latency, calls, tokens and dollars; totals per 1k, per success, per useful doc.

Per-stage sums come from :mod:`ragcost.cost.aggregate` and percentiles from :mod:`ragcost.cost.stats`
(numpy's ``method="linear"`` over each stage's *calls*, distinct ``call_id``, wall seconds). Per-query figures share a batch call's totals evenly over its items (a row's share is
the call's total / items), so a report over a time window counts only its own queries' part.
Dollars are the rows' ``cost_usd`` (already per query), so the total is the sum of the stages.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Optional, Sequence

from ragcost.cost.aggregate import StageAgg, by_stage_of_rows, useful_by_stage
from ragcost.cost.fmt import json_safe, money, money_column
from ragcost.cost.ledger import Ledger
from ragcost.cost.stats import PERCENTILE_METHOD, percentiles, ratio
from ragcost.cost.useful import cost_per_useful, useful_of  # noqa: F401  (useful_of: re-exported)


@dataclass
class StageRow:
    """One stage's line."""

    stage: str
    calls: int
    calls_per_query: float
    p50_s: Optional[float]
    p95_s: Optional[float]
    p99_s: Optional[float]
    input_tokens_per_query: float
    cached_input_tokens_per_query: float
    output_tokens_per_query: float
    tokens_per_query: float
    retries: float
    failures: float
    usd: float
    usd_per_query: float
    share: Optional[float]  # of the total dollars; None when the total is 0
    useful: float = 0  # useful documents of the queries this stage served
    usd_per_useful: Optional[float] = None  # the stage's dollars / those useful documents; None = 0 useful
    # Where a shard actor's calls ran: one entry per (Ray node, resource it was priced on), with its dollars.
    nodes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The stage's name, and for a shard the node(s) it ran on and the resource each priced it on."""
        if not self.nodes:
            return self.stage
        return f"{self.stage} @ " + ", ".join(f"{n['node']} ({n['resource']})" for n in self.nodes)


@dataclass
class Totals:
    """The whole selection."""

    queries: int
    successful: int
    usd: float
    usd_per_request: Optional[float]
    usd_per_1k_queries: Optional[float]
    usd_per_successful: Optional[float]  # all dollars (retries, fallbacks, failures) / successful requests
    useful: float  # expected (a float) under the calibrated judge
    usd_per_useful: Optional[float]  # None = 0 useful documents delivered
    retrieved: int
    useful_judges: list[str] = field(default_factory=list)  # the judges that counted them (older rows: none recorded)


@dataclass
class RouteRow:
    """The queries a route stage sent down one path (``small``, ``large``, ``small>large`` after an escalation)."""

    route: str
    queries: int
    successful: int
    escalated: int  # queries whose path went on to a further target
    calls: float  # stage calls made for these queries (a batch call counts as its share)
    input_tokens: float
    output_tokens: float
    usd: float
    usd_per_query: Optional[float]
    usd_per_successful: Optional[float]
    p50_s: Optional[float]  # query latency: the wall seconds of the calls that served each query
    p95_s: Optional[float]
    by_resource: dict[str, dict[str, float]] = field(default_factory=dict)  # resource -> input/output tokens, usd


@dataclass
class Report:
    """Rows per stage and the totals, with what was selected."""

    stages: list[StageRow]
    totals: Totals
    routes: list[RouteRow] = field(default_factory=list)  # empty when no query was routed
    since: Optional[str] = None
    pipeline: Optional[str] = None
    percentile_method: str = PERCENTILE_METHOD
    notes: list[str] = field(default_factory=list)
    # Marginal and fully loaded, per resource (ragcost.cost.bill.Bill.to_dict); None until a price book is applied.
    bill: Optional[dict[str, Any]] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _stage_row(s: StageAgg, n: int, total: float, useful: float) -> StageRow:
    """One stage's line: per-query figures are the stage's per-query shares over the n queries."""
    p50, p95, p99 = s.latency((50, 95, 99))
    tin, tcached, tout = (float(x or 0.0) for x in (s.input_tokens, s.cached_input_tokens, s.output_tokens))
    return StageRow(
        stage=s.stage, calls=s.distinct_calls, calls_per_query=ratio(s.calls, n) or 0.0,
        p50_s=p50, p95_s=p95, p99_s=p99,
        input_tokens_per_query=ratio(tin, n) or 0.0, cached_input_tokens_per_query=ratio(tcached, n) or 0.0,
        output_tokens_per_query=ratio(tout, n) or 0.0, tokens_per_query=ratio(tin + tcached + tout, n) or 0.0,
        retries=float(s.retries), failures=float(s.failures), usd=s.usd, usd_per_query=ratio(s.usd, n) or 0.0,
        share=ratio(s.usd, total), useful=useful, usd_per_useful=cost_per_useful(s.usd, useful),
    )


def build_report(ledger: str | Ledger, since: datetime | None = None, pipeline: str | None = None) -> Report:
    """Read the ledger (a URL, opened read-only, or an open Ledger) and aggregate it.

    A URL with no ledger (no file, no tables) is a StoreError: a report never creates one.
    """
    own = isinstance(ledger, str)
    led = Ledger(ledger, read_only=True) if own else ledger
    try:
        qrows, srows = led.read(since, pipeline)
    finally:
        if own:
            led.close()
    return aggregate(qrows, srows, since=since, pipeline=pipeline)


def aggregate(qrows: list[dict], srows: list[dict], since: datetime | None = None, pipeline: str | None = None) -> Report:
    """The report of already-read ledger rows (pure; the tests call it directly too)."""
    n = len(qrows)
    stages = by_stage_of_rows(srows)
    total = sum(s.usd for s in stages.values())
    per_stage = useful_by_stage(stages, {str(q["query_id"]): useful_of(q) for q in qrows if "query_id" in q})
    rows = [_stage_row(s, n, total, per_stage[name]) for name, s in stages.items()]
    where = nodes_by_stage(srows)
    for r in rows:
        r.nodes = where.get(r.stage, [])
    notes = [f"{s.stage}: {s.unknown_cached} row(s) without a cached-token count (server did not say)"
             for s in stages.values() if s.unknown_cached]
    ok = sum(1 for q in qrows if q["ok"])
    useful = sum(useful_of(q) for q in qrows)
    totals = Totals(
        queries=n, successful=ok, usd=total, usd_per_request=ratio(total, n),
        usd_per_1k_queries=None if not n else total / n * 1000, usd_per_successful=ratio(total, ok),
        useful=useful, usd_per_useful=cost_per_useful(total, useful),
        retrieved=sum(int(q["retrieved"] or 0) for q in qrows),
        useful_judges=sorted({str(q["useful_judge"]) for q in qrows if q.get("useful_judge")}),
    )
    return Report(rows, totals, routes=by_route(qrows, srows), since=since.isoformat() if since else None,
                  pipeline=pipeline, notes=notes)


def nodes_by_stage(srows: list[dict]) -> dict[str, list[dict[str, Any]]]:
    """Per stage whose rows name a Ray node (shard actors): its dollars per (node, resource), in node order."""
    out: dict[str, dict[tuple[str, str], float]] = {}
    for r in srows:
        if r.get("node"):
            key = (str(r["node"]), str(r["resource"]))
            per = out.setdefault(r["stage"], {})
            per[key] = per.get(key, 0.0) + float(r["cost_usd"] or 0.0)
    return {stage: [{"node": n, "resource": res, "usd": usd} for (n, res), usd in sorted(per.items())]
            for stage, per in out.items()}


def by_route(qrows: list[dict], srows: list[dict]) -> list[RouteRow]:
    """Calls, tokens, $ and latency per route path; [] when no query was routed."""
    from ragcost.cost.tracing import query_latency

    if not any(q.get("route") for q in qrows):
        return []
    path_of = {str(q["query_id"]): q.get("route_path") or q.get("route") or "(unrouted)" for q in qrows}
    rows_of: dict[str, list[dict]] = {}
    for r in srows:
        rows_of.setdefault(str(r["query_id"]), []).append(r)
    out: list[RouteRow] = []
    for path in sorted(set(path_of.values()), key=lambda p: (p.count(">"), p)):
        qs = [q for q in qrows if path_of[str(q["query_id"])] == path]
        rows = [r for q in qs for r in rows_of.get(str(q["query_id"]), [])]
        agg = StageAgg(path)
        res: dict[str, dict[str, float]] = {}
        for r in rows:
            share = max(int(r["items"] or 1), 1)
            agg.add(r, share=share)
            if r["calls"]:
                d = res.setdefault(r["resource"], {"input_tokens": 0.0, "output_tokens": 0.0, "usd": 0.0})
                d["input_tokens"] += (r["input_tokens"] or 0) / share
                d["output_tokens"] += (r["output_tokens"] or 0) / share
                d["usd"] += float(r["cost_usd"] or 0.0)
        lat = [query_latency(rows_of.get(str(q["query_id"]), [])) for q in qs]
        p50, p95 = percentiles(lat, (50, 95))
        ok = sum(1 for q in qs if q["ok"])
        out.append(RouteRow(route=path, queries=len(qs), successful=ok, escalated=len(qs) if ">" in path else 0,
                            calls=agg.calls, input_tokens=float(agg.input_tokens or 0.0),
                            output_tokens=float(agg.output_tokens or 0.0), usd=agg.usd, usd_per_query=ratio(agg.usd, len(qs)),
                            usd_per_successful=ratio(agg.usd, ok), p50_s=p50, p95_s=p95, by_resource=res))
    return out


def to_json(report: Report) -> str:
    """Always valid JSON: a NaN or infinite figure (a ledger priced before prices had to be finite) is null."""
    return json.dumps(json_safe(report.to_dict()), indent=2, allow_nan=False)


BILL_COLUMNS = ["resource", "basis", "provisioned_hours", "busy_hours", "utilization", "usd_marginal", "usd_fully_loaded",
                "usd_per_query_fully_loaded", "usd_per_useful_fully_loaded"]
CSV_COLUMNS = ["stage", "calls", "calls_per_query", "p50_s", "p95_s", "p99_s", "input_tokens_per_query",
               "cached_input_tokens_per_query", "output_tokens_per_query", "tokens_per_query", "retries",
               "failures", "usd", "usd_per_query", "share", "useful", "usd_per_useful", "nodes"]
TOTAL_COLUMNS = ["queries", "successful", "usd_per_1k_queries", "usd_per_successful"]


def to_csv(report: Report) -> str:
    """One row per stage and a final ``(total)`` row that also carries the totals-only columns."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=CSV_COLUMNS + TOTAL_COLUMNS + BILL_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in report.stages:
        w.writerow({**{k: v for k, v in asdict(r).items() if k in CSV_COLUMNS},
                    "nodes": ";".join(f"{n['node']}={n['resource']}" for n in r.nodes)})
    for r in (report.bill or {}).get("resources", []):  # the bill: one row per resource, stage "(resource)"
        w.writerow({"stage": "(resource)", **{k: r.get(k) for k in BILL_COLUMNS}})
    t = report.totals
    w.writerow({
        "stage": "(total)", "calls": sum(r.calls for r in report.stages),
        "calls_per_query": sum(r.calls_per_query for r in report.stages),
        "tokens_per_query": sum(r.tokens_per_query for r in report.stages),
        "usd": t.usd, "usd_per_query": t.usd_per_request, "share": 1.0 if t.usd else None,
        "useful": t.useful, "usd_per_useful": t.usd_per_useful,
        **{k: getattr(t, k) for k in TOTAL_COLUMNS},
        **({"usd_marginal": report.bill["usd_marginal"], "usd_fully_loaded": report.bill["usd_fully_loaded"],
            "usd_per_query_fully_loaded": report.bill["usd_per_query_fully_loaded"],
            "usd_per_useful_fully_loaded": report.bill["usd_per_useful_fully_loaded"],
            "basis": report.bill["basis"]} if report.bill else {}),
    })
    return out.getvalue()


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


def to_rich_table(report: Report):
    """A rich renderable: the stage table and the totals under it."""
    from rich.console import Group

    t = report.totals
    rows = [["queries (successful)", f"{t.queries} ({t.successful})"], ["$ total", money(t.usd)],
            ["$ per 1k queries", money(t.usd_per_1k_queries)],
            ["$ per successful request", money(t.usd_per_successful) if t.successful else "n/a (0 successful)"],
            ["useful documents", f"{t.useful:.4g}" + (f" (judge: {', '.join(t.useful_judges)})" if t.useful_judges else "")],
            ["$ per useful retrieved document", money(t.usd_per_useful, missing="n/a (0 useful)")]]
    totals = FittedTable(("what", "value"), rows, title="totals", show_header=False)
    routes = [_route_table(report)] if report.routes else []
    return Group(_stage_table(report), _useful_table(report), *routes, totals, *report.notes)


def _route_table(report: Report) -> "FittedTable":
    """Per route path: queries, calls, tokens, $ and query latency (an escalation is its own path)."""
    usd = money_column([r.usd for r in report.routes])
    per = money_column([r.usd_per_successful for r in report.routes], missing="n/a")
    cells = [[r.route, f"{r.queries} ({r.successful})", f"{r.calls:.4g}", f"{r.input_tokens + r.output_tokens:.6g}",
              u, pu, _ms(r.p50_s), _ms(r.p95_s)] for r, u, pu in zip(report.routes, usd, per)]
    return FittedTable(("route", "queries\n(ok)", "calls", "tokens", "$", "$\n/success", "p50\nms", "p95\nms"), cells,
                       title="by route", simple=True,
                       caption="route: the targets a query went to in order (small>large: escalated); latency per query")


def _hours(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4g}"


def bill_table(bill: dict[str, Any]):
    """Per resource: provisioned and busy hours, utilization, $ marginal and $ fully loaded; the totals both ways."""
    from rich.console import Group

    res = bill["resources"]
    marg = money_column([r["usd_marginal"] for r in res] + [bill["usd_marginal"]])
    full = money_column([r["usd_fully_loaded"] for r in res] + [bill["usd_fully_loaded"]])
    cells = [[r["resource"], r["basis"], _hours(r["provisioned_hours"]), _hours(r["busy_hours"]),
              "-" if r["utilization"] is None else f"{r['utilization'] * 100:.3g}%", m, f]
             for r, m, f in zip(res, marg, full)]
    cells.append(["total", bill["basis"], "", "", "", marg[-1], full[-1]])
    span = (f"{bill['window_start']} .. {bill['window_end']} ({bill['window_hours']:.4g} h)"
            if bill["window_start"] else "empty")
    table = FittedTable(("resource", "fully loaded from", "provisioned\nh", "busy\nh", "util", "$\nmarginal",
                         "$ fully\nloaded"), cells, names=2, simple=True, title=f"the bill - window {span}",
                        caption="marginal: busy time only (the bill at 100% utilization); fully loaded: what the "
                                "provisioned capacity cost in the window")
    pq = money_column([bill["usd_per_query_marginal"], bill["usd_per_query_fully_loaded"]])
    pu = money_column([bill["usd_per_useful_marginal"], bill["usd_per_useful_fully_loaded"]], missing="n/a (0 useful)")
    lines = [f"$ per query: marginal {pq[0]}, fully loaded {pq[1]} ({bill['queries']} queries)",
             f"$ per useful document: marginal {pu[0]}, fully loaded {pu[1]} ({bill['useful']:.4g} useful)",
             *_phase_lines(bill), *bill["notes"]]
    return Group(table, *lines)


def _phase_lines(bill: dict[str, Any]) -> list[str]:
    """Start-up and shutdown as their own lines: provisioned time in which no query could run."""
    up, down = bill.get("startup_hours"), bill.get("shutdown_hours")
    if up is None and down is None:
        return []
    lines = []
    if up is not None:
        lines.append(f"start-up (process start to loading done): {up:.4g} h of the provisioned hours")
    if down is not None:
        lines.append(f"shutdown (last query done to process exit): {down:.4g} h of the provisioned hours")
    if bill.get("utilization_running") is not None:
        lines.append(f"utilization with start-up and shutdown left out: {bill['utilization_running'] * 100:.3g}%")
    return lines


def _useful_table(report: Report) -> "FittedTable":
    """Per stage: its dollars / the useful documents of the queries it served (a table of its own keeps both narrow)."""
    t = report.totals
    usd = money_column([r.usd for r in report.stages] + [t.usd])
    per = money_column([r.usd_per_useful for r in report.stages] + [t.usd_per_useful], missing="n/a (0 useful)")
    cells = [[r.label, u, f"{r.useful:.4g}", pu] for r, u, pu in zip(report.stages, usd, per)]
    cells.append(["total", usd[-1], f"{t.useful:.4g}", per[-1]])
    return FittedTable(("stage", "$", "useful", "$/useful"), cells, title="per useful document", simple=True,
                       caption="useful: the useful documents of the queries each stage served")


def _stage_table(report: Report) -> "FittedTable":
    title = "ragcost report" + (f" - pipeline {report.pipeline}" if report.pipeline else "") + (
        f" - since {report.since}" if report.since else "")
    usd = money_column([r.usd_per_query for r in report.stages])
    cells = [[r.label, _ms(r.p50_s), _ms(r.p95_s), _ms(r.p99_s), f"{r.calls_per_query:.3g}", f"{r.tokens_per_query:.4g}",
              u, _share(r.share)] for r, u in zip(report.stages, usd)]
    # Two-line headers keep the number columns as narrow as their numbers.
    headers = ("stage", "p50\nms", "p95\nms", "p99\nms", "calls\n/query", "tokens\n/query", "$\n/query", "share")
    return FittedTable(headers, cells, title=title, simple=True,
                        caption=f"latency percentiles over calls (numpy method={report.percentile_method})")


def _share(x: Optional[float]) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.1%}"


class FittedTable:
    """A table whose number columns keep their full width at any terminal width that holds them.

    A number cut to fit (``$1.1200…`` for $1.12e-05) reads as another number. So the number
    columns get exactly the width of their widest cell and the first ``names`` columns fold
    into what is left. A terminal too narrow even for the numbers folds them onto a second
    line rather than cutting them.
    """

    def __init__(self, headers: Sequence[str], cells: list[list[str]], simple: bool = False, names: int = 1, **table_kw: Any):
        self.headers, self.cells, self.simple, self.names, self.table_kw = headers, cells, simple, names, table_kw

    def __rich_console__(self, console, options):
        from rich import box
        from rich.table import Table

        style = {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False, "collapse_padding": True} if self.simple else {}
        table = Table(**style, **self.table_kw)
        widths = [max([len(line) for line in h.split("\n")] + [len(row[i]) for row in self.cells])
                  for i, h in enumerate(self.headers)]
        n, k = len(widths), self.names
        chrome = 2 * (n - 1) if self.simple else 3 * n + 1  # padding and rules between and around columns
        fits = sum(widths[k:]) + chrome + sum(min(w, 8) for w in widths[:k]) <= options.max_width
        for h in self.headers[:k]:
            table.add_column(h, justify="left", overflow="fold")
        for h, w in zip(self.headers[k:], widths[k:]):
            table.add_column(h, justify="right", **({"width": w, "no_wrap": True} if fits else {"overflow": "fold"}))
        for row in self.cells:
            table.add_row(*row)
        yield table


_FittedTable = FittedTable  # the old private name
