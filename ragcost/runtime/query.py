"""Run queries through a pipeline in batches and collect per-stage measurements and dollars."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from ragcost import process
from ragcost.cost.aggregate import StageAgg, by_stage_of_calls, useful_by_stage
from ragcost.cost.stats import percentile
from ragcost.cost.useful import cost_per_useful
from ragcost.runtime.judge import judge_label, useful_count  # noqa: F401  (useful_count: re-exported)
from ragcost.runtime.pipeline import Pipeline
from ragcost.runtime.cpu import METER
from ragcost.runtime.runner import StageCall, overhead_call
from ragcost.records import QueryState


@dataclass
class StageStats:
    """One stage's line of a query run, from the shared aggregation (:mod:`ragcost.cost.aggregate`)."""

    stage: str
    resource: str
    calls: int = 0
    items: int = 0
    seconds: list[float] = field(default_factory=list)
    cost_usd: float = 0.0
    input_tokens: Optional[int] = None
    notes: dict[str, Any] = field(default_factory=dict)
    useful: float = 0  # useful documents of the queries this stage served

    @classmethod
    def of(cls, agg: StageAgg, useful: float = 0) -> "StageStats":
        return cls(agg.stage, agg.resource or "", agg.calls, agg.items, agg.walls, agg.usd, agg.input_tokens, agg.notes, useful)

    @property
    def usd_per_useful(self) -> Optional[float]:
        """This stage's dollars / the useful documents of the queries it served; None when they delivered none."""
        return cost_per_useful(self.cost_usd, self.useful)

    def pct_ms(self, q: float) -> float:
        v = percentile(self.seconds, q)
        return 0.0 if v is None else v * 1000


@dataclass
class QueryRun:
    pipeline: str
    states: list[QueryState]
    calls: list[StageCall]
    storage_usd: float
    price_book_version: str
    useful: list[float] = field(default_factory=list)  # per state, by the pipeline's judge (expected: a float); 0 for a failed, blocked or abstaining query
    judge: str = ""  # the judge that counted them, e.g. "cited" or "score >= 0.61"
    book: Any = None  # the price book it was priced with (for the fully loaded figure at declared traffic)

    @property
    def total_usd(self) -> float:
        return sum(c.cost_usd for c in self.calls) + self.storage_usd

    @property
    def useful_total(self) -> float:
        return sum(self.useful)

    @property
    def usd_per_useful(self) -> Optional[float]:
        """Every dollar (all stages, retries, failed calls, storage) / the useful documents; None when there are none."""
        return cost_per_useful(self.total_usd, self.useful_total)

    @property
    def storage_usd_per_useful(self) -> Optional[float]:
        """Storage is charged to every query, so its useful documents are all of them."""
        return cost_per_useful(self.storage_usd, self.useful_total)

    def usd_by_resource(self) -> dict[str, float]:
        """The run's marginal dollars per price-book resource (storage apart)."""
        out: dict[str, float] = {}
        for c in self.calls:
            out[c.record.resource] = out.get(c.record.resource, 0.0) + c.cost_usd
        return out

    def declared_traffic(self, book) -> tuple[float, list[str]]:
        """Fully loaded $ per query if the book's declared traffic ran like this run (ragcost.cost.bill)."""
        from ragcost.cost.bill import declared_traffic_per_query

        n = len(self.states)
        return declared_traffic_per_query(self.usd_by_resource(), n, self.storage_usd / n if n else 0.0, book)

    def latency_s(self, s: QueryState) -> float:
        """Seconds of query ``s``: the wall seconds of the stage calls that served it (its batch's, when batched)."""
        from ragcost.cost.tracing import query_latency

        return query_latency({"call_id": c.call_id, "calls": c.record.calls, "wall_seconds": c.record.wall_seconds}
                             for c in self.calls if c.serves(s))

    def stage_stats(self) -> list[StageStats]:
        """Per stage, in first-seen order; every call is one latency sample, with the useful documents it served."""
        pos = {id(s): str(i) for i, s in enumerate(self.states)}

        def served(c: StageCall) -> list[str]:
            return [pos[id(c.query)]] if c.query is not None else [pos[id(s)] for s in c.served if id(s) in pos]

        aggs = by_stage_of_calls((c.record, c.cost_usd, served(c)) for c in self.calls)
        useful = useful_by_stage(aggs, {str(i): n for i, n in enumerate(self.useful)})
        return [StageStats.of(a, useful[name]) for name, a in aggs.items()]


def run_queries(
    pipe: Pipeline,
    items: list[tuple[str, str]],
    filter_: Optional[str | dict] = None,
    k: Optional[int] = None,
    batch_size: int = 32,
    ledger_url: Optional[str] = None,
    write_ledger: bool = True,
    on_event: Any = None,
) -> QueryRun:
    """Run (id, text) queries in batches on a :class:`ragcost.runtime.api.Session` (the API's and serve's query
    path): every stage call is timed, priced once and written to the ledger, with each query's ``id`` kept as
    its ``source_id``. ``on_event``: a generate stage's streamed text, as ``Session.run_batch`` takes it.

    Each batch's queries and their rows are one transaction (a group commit, as serve's ledger writer makes),
    written as soon as the batch finishes, so a crash keeps every completed batch and no partial rows of the
    one that failed. One commit a query cost 5.8 ms of CPU against 1.0 ms a query in a commit of 64
    (DuckDB, 4 stage rows a query): in a batch, the ledger would have cost more than the search.
    """
    from ragcost.cost.ledger import utcnow
    from ragcost.runtime.api import Session
    from ragcost.runtime.request import check_k, check_text
    from ragcost.store.filters import parse_filter

    for qid, text in items:
        check_text(text, f"query {qid}")
    k = check_k(k)
    expr = parse_filter(filter_)
    if expr is not None:
        # Compile once against the declared fields so a bad filter fails before any model loads.
        pipe.store().matching_labels(expr)
    fetch, keep = pipe.query_sizes(k)  # k is the number of results each query gets, whatever a re-rank keeps
    if pipe.config.useful.judge == "calibrated":
        pipe.calibration  # noqa: B018  (refused before any query runs when fit for another configuration)
    # A process the `ragcost` command started is this run: it holds its instance from the process's start to its
    # exit, and every CPU-second it uses is the run's (loading, and the tail after the last query, at exit).
    whole = process.owned() and write_ledger
    # A batch holds its instance for its wall time (ragcost.cost.bill); its lifetime beats after every batch.
    session = Session(pipe, ledger_url, write_ledger, lifetime="batch", held_since=process.started_at() if whole else None,
                      beat_every_s=0.0)
    states: list[QueryState] = []
    useful: list[float] = []
    calls: list[StageCall] = []
    storage = 0.0
    query_ids: list[str] = []
    startup_cpu = time.process_time()
    try:
        session.warm_up()
        startup_cpu = time.process_time()  # imports, loading the models, opening the index and the ledger: before any query
        for i in range(0, len(items), batch_size):
            batch = [QueryState(text=t, id=qid, k=fetch, filter=expr, keep=keep, source_id=qid)
                     for qid, t in items[i : i + batch_size]]
            res, answers = session.run_states(batch, on_event)
            states.extend(res.states)
            useful.extend(a.useful for a in answers)
            calls.extend(res.calls)
            storage += res.storage_usd_per_query * len(batch)
            last = i + batch_size >= len(items)
            tail_due = session.ledger is not None and not whole and last  # no later batch claims this write
            ids = session.record_many(answers, trace=not tail_due)
            query_ids += ids
            if tail_due:  # this batch pays its own write
                tail = _charge_last_write(pipe, session.ledger, session.run_id, res.states, ids)
                if tail is not None:
                    res.calls.append(tail)
                    calls.append(tail)
                    row = _tail_row(tail, pipe)
                    for a in answers:
                        a.rows.insert(len(a.records), row)
                        a.records.append(tail.record)
                session.trace(answers)
    finally:
        if session.ledger is not None and whole and session.run_id is not None:
            # closed at the process's exit, with the CPU of start-up and of the tail charged
            process.at_exit(_close_at_exit, session.ledger.url, session.run_id, session.life_id, utcnow(), query_ids,
                            startup_cpu, pipe.config.resource, pipe.price_book)
        session.close(stop_lifetime=not whole)
    run = QueryRun(pipe.config.name, states, calls, storage, pipe.price_book.version, useful, judge_label(pipe))
    run.book = pipe.price_book
    return run


def _tail_row(tail: StageCall, pipe: Pipeline) -> dict:
    """The last write's row as each query of the batch got it (its share), for that query's spans."""
    from ragcost.cost.compute import stage_row

    return stage_row(tail.record, pipe.price_book, tail.call_id)


def _charge_last_write(pipe: Pipeline, ledger, run_id: str, last: list[QueryState], ids: list[str]) -> Optional[StageCall]:
    """In a process the run does not own (the Python API, a test): the last batch's ledger write, which no later
    batch's overhead claims, as an overhead call shared by that batch's queries, added to their ledger rows and
    returned for the result and the trace (a process the CLI owns charges it at exit, with the rest of its tail)."""
    from ragcost.cost.compute import stage_row

    over = overhead_call(last, pipe.config.resource, pipe.price_book)
    if over is None:
        return None
    over.record.notes["what"] = "the last batch's ledger write"
    ledger.add_to_queries(run_id, ids, [stage_row(over.record, pipe.price_book)])
    return over


def _close_at_exit(url: str, run_id: str, life: str, stopping_at, query_ids: list[str], startup_cpu: float,
                   resource: str, book) -> None:
    """At the exit of a batch process: its start-up CPU and the CPU after its last query (ledger writes, output,
    this) as two calls shared by the run's queries, then its lifetime closed now, shutdown from ``stopping_at``."""
    from ragcost.cost.compute import stage_row
    from ragcost.cost.ledger import Ledger
    from ragcost.records import OVERHEAD_STAGE, STARTUP_STAGE, UsageRecord

    ledger = Ledger(url)  # opening it is part of the tail, so claimed after
    try:
        tail = METER.claim_overhead()
        if query_ids and resource in book.resources:
            record = lambda stage, cpu, what: UsageRecord(  # noqa: E731
                stage=stage, resource=resource, items=len(query_ids), calls=0, wall_seconds=0.0, cpu_seconds=cpu,
                notes={"what": what})
            rows = [stage_row(record(stage, cpu, what), book)
                    for stage, cpu, what in ((STARTUP_STAGE, startup_cpu, "process CPU before the first query: imports, "
                                              "loading the models, opening the index"),
                                             (OVERHEAD_STAGE, tail, "process CPU after the last query: its ledger "
                                              "writes, the output, exit"))]
            ledger.add_to_queries(run_id, query_ids, rows)
            # Writing those rows is CPU of the tail too, two rows a query (~0.35 s of 12.7 for 550 queries here): claimed
            # now and added to the tail's rows; what is left unclaimed is this update and the close
            ledger.checkpoint()
            more = METER.claim_overhead()
            if more > 0:
                ledger.raise_call(run_id, rows[1]["call_id"], query_ids, more,
                                  stage_row(record(OVERHEAD_STAGE, more, ""), book)["cost_usd"])
        else:
            ledger.checkpoint()
        # The process ends right after the stamp; what follows it (the commit, the close, the kernel's teardown) is held
        # time no clock inside can see (0.1 s of a 12 s run on a slow CI machine): the rows' checkpoint went first.
        ledger.stop_lifetime(life, stopping_at=stopping_at)
    finally:
        ledger.close()
