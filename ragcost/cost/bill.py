"""The bill: marginal and fully loaded cost of a window, per resource, from the ledger and the price book.

- **Marginal** is the sum of the rows' ``cost_usd``: every call paid for the time it kept its
  resource busy (CPU-seconds / vCPUs, a GPU's busy periods), tokens, storage spread over the
  book's ``queries_per_month``. It is the bill at 100% utilization.
- **Busy hours** of a time resource are the hours its marginal dollars paid for:
  ``marginal $ / usd_per_hour`` (CPU: CPU-seconds / vCPUs / 3600).
- **Provisioned hours** of a time resource in the window ``[start, end]`` are the union, per host
  and serve replica, of the lifetimes the ledger holds for it (``ragcost serve`` with its
  heartbeats, a batch ``ragcost query``), clipped to the window -- several workers of one server
  on one host hold that host once; each replica (``serve.replica``) holds its own instance of the
  resource, so replicas' hours add up, on one host too -- plus ``fleet.<resource>.count x window
  hours`` the book declares always on. Utilization is busy over provisioned, both summed over replicas.
- **Fully loaded** of a time resource with provisioned hours: ``provisioned hours x usd_per_hour``
  (never below its marginal: if it is, work ran outside any recorded lifetime and a note says so).
  Without provisioned hours the resource falls back to the book's **declared traffic**: at
  ``queries_per_month`` queries a month of this window's busy time per query it needs
  ``ceil(queries_per_month x busy hours per query / 730)`` (at least 1) instances always on, so a
  query pays ``instances x usd_per_hour x 730 / queries_per_month``; the figure is labelled so.
  Token-priced resources have no idle time: fully loaded = marginal. Storage over a window with
  provisioned time is its GiB-months for the window's hours, spread over the window's real queries;
  otherwise its marginal (already per declared traffic).

Pure functions over plain rows; :func:`build_bill` is what ``report`` calls.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Optional

from ragcost.cost.pricebook import PriceBook, StorageResource, TimeResource, TokenResource
from ragcost.cost.stats import ratio
from ragcost.cost.useful import useful_of

HOURS_PER_MONTH = 730
DECLARED = "declared traffic"
RECORDED = "recorded lifetimes"
FLEET = "fleet"


@dataclass
class ResourceBill:
    """One resource's line of the bill."""

    resource: str
    kind: str  # time | tokens | storage | unknown (not in the current book)
    usd_per_hour: Optional[float]
    basis: str  # how fully loaded was found: recorded lifetimes, fleet, both, declared traffic, per token, storage
    provisioned_hours: Optional[float]  # None: no provisioned data (declared traffic) or not time-priced
    busy_hours: Optional[float]
    utilization: Optional[float]  # busy / provisioned; None without provisioned hours
    usd_marginal: float
    usd_fully_loaded: float
    instances: Optional[int] = None  # declared traffic: instances always on that traffic needs


@dataclass
class Bill:
    """A window's bill: per resource, the totals, and per query and per useful document both ways."""

    window_start: Optional[str]
    window_end: Optional[str]
    window_hours: float
    queries: int
    useful: float  # the judges' counts (expected where the judge is calibrated): report's totals divide by the same
    resources: list[ResourceBill]
    usd_marginal: float
    usd_fully_loaded: float
    usd_per_query_marginal: Optional[float]
    usd_per_query_fully_loaded: Optional[float]
    usd_per_useful_marginal: Optional[float]
    usd_per_useful_fully_loaded: Optional[float]
    basis: str  # provisioned | declared traffic | mixed | none
    queries_per_month: int
    notes: list[str] = field(default_factory=list)
    replicas: list[dict[str, Any]] = field(default_factory=list)  # per serve replica (:func:`by_replica`); [] for one unnamed
    # Of the recorded lifetimes' hours in the window: start-up (process start to loading done), shutdown (last query
    # done to exit), and utilization over the rest; None where no lifetime recorded its phases.
    startup_hours: Optional[float] = None
    shutdown_hours: Optional[float] = None
    utilization_running: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def merged_hours(spans: Iterable[tuple[datetime, datetime]], lo: Optional[datetime], hi: Optional[datetime]) -> float:
    """Hours of the union of ``spans`` clipped to ``[lo, hi]`` (an open side is not clipped)."""
    clipped = []
    for s, e in spans:
        s = max(s, lo) if lo is not None else s
        e = min(e, hi) if hi is not None else e
        if e > s:
            clipped.append((s, e))
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(clipped):
        if cur_e is not None and s <= cur_e:
            cur_e = max(cur_e, e)
            continue
        if cur_e is not None:
            total += (cur_e - cur_s).total_seconds()
        cur_s, cur_e = s, e
    if cur_e is not None:
        total += (cur_e - cur_s).total_seconds()
    return total / 3600.0


def lifetime_end(row: Mapping[str, Any]) -> datetime:
    """A lifetime ends when it stopped; a crashed or live one at its last heartbeat (a lower bound)."""
    return row.get("stopped_at") or row.get("heartbeat_at") or row["started_at"]


def provisioned_hours(lifetimes: Iterable[Mapping[str, Any]], lo: Optional[datetime], hi: Optional[datetime]) -> dict[str, float]:
    """Per resource: the union per (host, replica) of its lifetimes, clipped to the window, summed over them."""
    by: dict[tuple[str, str, str], list[tuple[datetime, datetime]]] = {}
    for r in lifetimes:
        key = (r["resource"], r.get("host") or "", r.get("replica") or "")
        by.setdefault(key, []).append((r["started_at"], lifetime_end(r)))
    out: dict[str, float] = {}
    for (res, _host, _replica), spans in by.items():
        out[res] = out.get(res, 0.0) + merged_hours(spans, lo, hi)
    return out


def phase_hours(lifetimes: Iterable[Mapping[str, Any]], lo: Optional[datetime], hi: Optional[datetime]) -> tuple[Optional[float], Optional[float]]:
    """(start-up, shutdown) hours of the lifetimes that recorded their phases (``ready_at``, ``stopping_at``), each
    clipped to the window; None for a phase no lifetime recorded."""
    def clipped(a: datetime, b: datetime) -> float:
        a, b = max(a, lo) if lo else a, min(b, hi) if hi else b
        return max((b - a).total_seconds(), 0.0) / 3600.0

    up = [clipped(r["started_at"], r["ready_at"]) for r in lifetimes if r.get("ready_at")]
    down = [clipped(r["stopping_at"], lifetime_end(r)) for r in lifetimes if r.get("stopping_at") and r.get("stopped_at")]
    return (sum(up) if up else None), (sum(down) if down else None)


def window(qrows: list[dict], lifetimes: list[dict], since: Optional[datetime], until: Optional[datetime]) -> tuple[Optional[datetime], Optional[datetime]]:
    """The window a bill covers: ``since`` (else the first query or lifetime) to ``until`` (else the last)."""
    starts = [q["at"] for q in qrows] + [r["started_at"] for r in lifetimes]
    ends = [q["at"] for q in qrows] + [lifetime_end(r) for r in lifetimes]
    lo = since if since is not None else (min(starts) if starts else None)
    hi = until if until is not None else (max(ends) if ends else None)
    return lo, hi


FUTURE_SLACK_S = 300.0  # clocks of the machines writing one ledger may differ by this much


def _usable_lifetimes(lifetimes: list[dict], notes: list[str], now: Optional[datetime] = None) -> list[dict]:
    """The lifetimes a bill can use; each one it leaves out is named in a note. A lifetime that ends before it
    starts has no length to bill; one dated in the future (a clock far off, or a hand-edited row) would stretch
    the window to that date and bill every hour up to it."""
    kept: list[dict] = []
    for r in lifetimes:
        start, end = r["started_at"], lifetime_end(r)
        ref = now or (datetime.now(timezone.utc).replace(tzinfo=None) if start.tzinfo is None else datetime.now(start.tzinfo))  # the ledger's naive UTC
        name = f"lifetime {r.get('lifetime_id') or '?'} ({r.get('resource')} on {r.get('host') or '?'})"
        if end < start:
            notes.append(f"{name} ends ({end.isoformat()}) before it starts ({start.isoformat()}): left out; "
                         "fix or delete that ledger row")
        elif (start - ref).total_seconds() > FUTURE_SLACK_S or (end - ref).total_seconds() > FUTURE_SLACK_S:
            notes.append(f"{name} is dated in the future ({start.isoformat()} to {end.isoformat()}): left out, so it "
                         "does not stretch the window; check that machine's clock, or fix or delete that ledger row")
        else:
            kept.append(r)
    return kept


def instances_for(queries_per_month: int, busy_hours_per_query: float) -> int:
    """Always-on instances that serve ``queries_per_month`` queries of this busy time each (at least one)."""
    return max(1, math.ceil(queries_per_month * busy_hours_per_query / HOURS_PER_MONTH - 1e-12))


def declared_traffic_usd_per_query(res: TimeResource, busy_hours_per_query: float, queries_per_month: int) -> tuple[float, int]:
    """($ per query, instances) of a time resource kept on for the book's declared traffic."""
    n = instances_for(queries_per_month, busy_hours_per_query)
    return n * res.usd_per_hour * HOURS_PER_MONTH / queries_per_month, n


def build_bill(qrows: list[dict], srows: list[dict], lifetimes: list[dict], book: PriceBook,
               since: Optional[datetime] = None, until: Optional[datetime] = None,
               lifetimes_table: bool = True) -> Bill:
    """The bill of the selected queries and stage rows, with the lifetimes of the processes that ran them."""
    from ragcost.records import STARTUP_STAGE, STORAGE_STAGE

    notes: list[str] = []
    lifetimes = _usable_lifetimes(lifetimes, notes)
    lo, hi = window(qrows, lifetimes, since, until)
    if lo is not None and hi is not None and hi < lo:
        notes.append(f"the window starts at {lo.isoformat()}, after its end {hi.isoformat()}: no data in it; "
                     "give an earlier --since")
        hi = lo
    hours = (hi - lo).total_seconds() / 3600.0 if lo is not None and hi is not None else 0.0
    n = len(qrows)
    useful = sum(useful_of(q) for q in qrows)  # the count report's totals divide by: one $/useful, not two
    qpm = book.queries_per_month
    if not lifetimes_table:
        notes.append("this ledger has no lifetime table (written by a ragcost before provisioned time was recorded): "
                      "no provisioned hours; time resources fall back to the book's declared traffic")
    marginal: dict[str, float] = {}
    startup_usd: dict[str, float] = {}  # a batch process's loading CPU (a row of its own): busy, but in start-up
    storage_usd, storage_rows = 0.0, 0
    for r in srows:
        usd = float(r.get("cost_usd") or 0.0)
        if r["stage"] == STORAGE_STAGE:
            storage_usd += usd
            storage_rows += 1
            continue
        marginal[r["resource"]] = marginal.get(r["resource"], 0.0) + usd
        if r["stage"] == STARTUP_STAGE:
            startup_usd[r["resource"]] = startup_usd.get(r["resource"], 0.0) + usd
    held = provisioned_hours(lifetimes, lo, hi)
    held_names = set(held)
    fleet = {name: e.count for name, e in book.fleet.items() if e.count > 0}
    names = list(dict.fromkeys([*marginal, *held, *fleet]))
    lines: list[ResourceBill] = []
    provisioned_any = False
    for name in names:
        res = book.resources.get(name)
        m = marginal.get(name, 0.0)
        if res is None:
            notes.append(f"resource {name!r} is not in {book.name}: its rows stand at their marginal dollars")
            lines.append(ResourceBill(name, "unknown", None, "marginal (not in the book)", None, None, None, m, m))
            continue
        if isinstance(res, TokenResource):
            lines.append(ResourceBill(name, "tokens", None, "per token", None, None, None, m, m))
            continue
        if isinstance(res, StorageResource):  # a stage row on a storage resource: refused when priced; keep it
            lines.append(ResourceBill(name, "storage", None, "storage", None, None, None, m, m))
            continue
        busy = m / res.usd_per_hour if res.usd_per_hour else None
        prov = held.get(name, 0.0) + fleet.get(name, 0) * hours
        basis = " + ".join(b for b, on in ((RECORDED, name in held_names), (FLEET, name in fleet)) if on)
        if prov > 0:
            provisioned_any = True
            full = prov * res.usd_per_hour
            if full < m:
                notes.append(f"{name}: busy {m / res.usd_per_hour:.6g} h exceeds the {prov:.6g} provisioned h recorded; "
                             "some work ran outside any recorded lifetime, so fully loaded is its marginal")
                full = m
            lines.append(ResourceBill(name, "time", res.usd_per_hour, basis, prov, busy,
                                      ratio(busy or 0.0, prov) if busy is not None else None, m, full))
            continue
        per_q = (busy or 0.0) / n if n else 0.0
        usd_q, inst = declared_traffic_usd_per_query(res, per_q, qpm)
        lines.append(ResourceBill(name, "time", res.usd_per_hour, f"{DECLARED} ({qpm:,} queries/month)", None, busy, None,
                                  m, max(usd_q * n, m), inst))
    if storage_rows:
        monthly = storage_usd / storage_rows * qpm  # a row charges monthly / queries_per_month
        by_window = provisioned_any and hours > 0
        storage_full = monthly * hours / HOURS_PER_MONTH if by_window else storage_usd
        lines.append(ResourceBill(STORAGE_STAGE, "storage", None,
                                  "GiB-months of the window" if by_window else f"{DECLARED} ({qpm:,} queries/month)",
                                  None, None, None, storage_usd, storage_full))
    total_m = sum(x.usd_marginal for x in lines)
    total_f = sum(x.usd_fully_loaded for x in lines)
    declared = [x.resource for x in lines if x.basis.startswith(DECLARED) and x.kind == "time"]
    if declared:
        notes.append(f"no provisioned data in this window for {', '.join(declared)}: fully loaded at the book's declared "
                     f"traffic ({qpm:,} queries/month), not at what was provisioned")
    basis = "none" if not lines else ("provisioned" if provisioned_any and not declared else
                                      "declared traffic" if declared and not provisioned_any else
                                      "mixed" if declared else "provisioned")
    if n == 0 and not lines and not notes:
        notes.append("no queries and no provisioned capacity in this window: nothing to bill")
    if n == 0 and provisioned_any:
        notes.append("no queries in this window: the provisioned capacity served none (per-query figures are n/a)")
    up, down = phase_hours(lifetimes, lo, hi)
    prov_h = sum(x.provisioned_hours or 0.0 for x in lines if x.kind == "time" and x.basis.startswith(RECORDED))
    busy_h = sum((x.busy_hours or 0.0) - startup_usd.get(x.resource, 0.0) / (x.usd_per_hour or 1.0)
                 for x in lines if x.kind == "time" and x.basis.startswith(RECORDED))
    running = prov_h - (up or 0.0) - (down or 0.0)
    return Bill(
        startup_hours=up, shutdown_hours=down,
        utilization_running=ratio(busy_h, running) if (up is not None or down is not None) and running > 0 else None,
        window_start=lo.isoformat() if lo else None, window_end=hi.isoformat() if hi else None, window_hours=hours,
        queries=n, useful=useful, resources=lines, usd_marginal=total_m, usd_fully_loaded=total_f,
        usd_per_query_marginal=ratio(total_m, n), usd_per_query_fully_loaded=ratio(total_f, n),
        usd_per_useful_marginal=ratio(total_m, useful), usd_per_useful_fully_loaded=ratio(total_f, useful),
        basis=basis, queries_per_month=qpm, notes=notes)


def by_replica(qrows: list[dict], srows: list[dict], lifetimes: list[dict], book: PriceBook,
               lo: Optional[datetime], hi: Optional[datetime]) -> list[dict[str, Any]]:
    """One line per serve replica over the bill's window ``[lo, hi]``: its queries, and per time resource
    its busy and provisioned hours and utilization, and its dollars; [] when no row names a replica.

    Storage is left out of a replica's dollars: it is the shared store's, once, in the bill's storage
    line; so the replicas' dollars plus that line are the bill's total."""
    from ragcost.cost.compute import STORAGE_STAGE

    names = sorted({q.get("replica") for q in qrows if q.get("replica")} |
                   {r.get("replica") for r in lifetimes if r.get("replica")})
    out = []
    for name in names:
        qs = [q for q in qrows if q.get("replica") == name]
        ids = {q["query_id"] for q in qs}
        rows = [r for r in srows if r["query_id"] in ids and r["stage"] != STORAGE_STAGE]
        b = build_bill(qs, rows, [r for r in lifetimes if r.get("replica") == name], book, since=lo, until=hi)
        out.append({"replica": name, "queries": b.queries, "useful": b.useful,
                    "resources": [{"resource": x.resource, "provisioned_hours": x.provisioned_hours,
                                   "busy_hours": x.busy_hours, "utilization": x.utilization}
                                  for x in b.resources if x.kind == "time"],
                    "usd_marginal": b.usd_marginal, "usd_fully_loaded": b.usd_fully_loaded,
                    "usd_per_query_fully_loaded": b.usd_per_query_fully_loaded, "basis": b.basis})
    return out


def declared_traffic_per_query(usd_by_resource: Mapping[str, float], queries: int, storage_usd_per_query: float,
                               book: PriceBook) -> tuple[float, list[str]]:
    """Fully loaded $ per query of a run at the book's declared traffic, and how each resource got there.

    ``usd_by_resource`` is the run's marginal dollars per resource over ``queries`` queries.
    """
    if queries < 1:
        return 0.0, []
    total = storage_usd_per_query
    how: list[str] = []
    for name, usd in usd_by_resource.items():
        res = book.resources.get(name)
        if isinstance(res, TimeResource) and res.usd_per_hour > 0:
            per, inst = declared_traffic_usd_per_query(res, usd / res.usd_per_hour / queries, book.queries_per_month)
            per = max(per, usd / queries)
            how.append(f"{name}: {inst} instance(s) x ${res.usd_per_hour:g}/h always on")
            total += per
        else:
            total += usd / queries
    return total, how
