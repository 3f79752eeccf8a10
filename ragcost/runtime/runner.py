"""The one runner: ``ragcost query`` and ``ragcost eval`` both run stages through it.

It times every stage call (wall seconds for latency, and the CPU seconds of the threads doing its
work -- the calling thread and the library pools it drives, :mod:`ragcost.runtime.cpu`; stage calls
in one process run one at a time so the pools work for one call -- which CPU resources are priced
by), counts items and calls, prices it from the price book
(``ragcost.cost.compute``, the one place cost is computed) and keeps which queries each call
served, so the ledger charges a batch call only to those queries. A stage that reports
per-query records (``QueryState.usage``: generate attempts) has those priced instead of the
query's share of the call; those of them on a CPU-priced resource that the stage timed by its own
clock (a generate attempt, the generate stage's own time) are given the call's measured CPU,
split over their busy periods by wall time, so generation on a CPU follows the CPU rule. Queries that a stage finished, blocked or failed skip later stages;
their outcome and the stage that decided it stay on the state for the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from time import perf_counter
from typing import Optional, Sequence

from ragcost.cost.compute import cost_of, new_id
from ragcost.cost.pricebook import PriceBook
from ragcost.errors import RagcostError, StageError
from ragcost.records import OVERHEAD_STAGE, QueryState, UsageRecord
from ragcost.runtime.cpu import METER
from ragcost.stages.base import Stage


@dataclass
class StageCall:
    """One priced usage record and the queries it served."""

    record: UsageRecord
    cost_usd: float
    call_id: str = field(default_factory=new_id)
    query: Optional[QueryState] = None  # set when the record is one query's own (a generate attempt)
    served: list[QueryState] = field(default_factory=list)  # the queries a batch call served

    def serves(self, s: QueryState) -> bool:
        """Whether this call's cost is (partly) this query's."""
        if self.query is not None:
            return self.query is s
        return any(x is s for x in self.served)


@dataclass
class RunResult:
    states: list[QueryState]
    calls: list[StageCall] = field(default_factory=list)
    storage_usd_per_query: float = 0.0

    @property
    def total_usd(self) -> float:
        return sum(c.cost_usd for c in self.calls) + self.storage_usd_per_query * len(self.states)

    def calls_for(self, s: QueryState) -> list[StageCall]:
        return [c for c in self.calls if c.serves(s)]


def overhead_call(states: list[QueryState], resource: str, book: PriceBook) -> Optional[StageCall]:
    """The CPU of ragcost's threads outside stage calls since the last claim, as one priced call
    shared by ``states`` (``calls`` 0: no latency sample), so their charged CPU equals the threads'."""
    from ragcost.runtime.cpu import METER

    seconds = METER.claim_overhead()
    if not states or resource not in book.resources:
        return None
    rec = UsageRecord(stage=OVERHEAD_STAGE, resource=resource, items=len(states), calls=0, wall_seconds=0.0,
                      cpu_seconds=seconds, notes={"what": "process CPU outside stage calls (parsing, ledger writes, HTTP, idle pools)"})
    return StageCall(rec, cost_of(rec, book), served=list(states))


class Runner:
    """Runs batches of queries through ``stages``; measures and prices each call."""

    def __init__(self, stages: Sequence[Stage], book: PriceBook) -> None:
        self.stages = list(stages)
        self.book = book

    def run(self, states: list[QueryState]) -> RunResult:
        result = RunResult(states=states)
        for stage in self.stages:
            if not any(s.active for s in states):
                break
            # A stage scoped to a route target (generate for `small`) sees only the queries sent there.
            accepts = getattr(stage, "accepts", None)  # a duck-typed stage (no Stage base) serves every query
            active = [s for s in states if s.active and (accepts is None or accepts(s))]
            if active:
                self.call(stage, active, result)
        return result

    def call(self, stage: Stage, active: list[QueryState], result: RunResult) -> None:
        """One timed, priced stage call over ``active``; its StageCalls are appended to ``result``."""
        for s in active:
            s.usage = []
        rec = UsageRecord(stage=stage.name, resource=stage.resource, items=len(active))
        # The runner measures, never the stage: wall time for latency, the CPU of the call's threads.
        try:
            with METER.call() as cpu:
                t0 = perf_counter()
                try:
                    stage.run(active, rec)
                finally:
                    rec.wall_seconds = perf_counter() - t0
        except RagcostError:
            raise
        except Exception as e:  # a stage bug or a library failure: recorded, named, and raised
            rec.cpu_seconds = cpu.seconds
            rec.failures += 1
            result.calls.append(StageCall(rec, cost_of(rec, self.book), served=active))
            raise StageError(f"stage {stage.name!r} failed: {type(e).__name__}: {e}") from e
        rec.cpu_seconds = cpu.seconds
        # Work the stage had done on other machines (shard actors on Ray), measured there: priced on its
        # own resource and shared by the call's queries, beside the call's own (driver-side) CPU.
        remote, rec.remote = rec.remote, []
        for remote in remote:
            result.calls.append(StageCall(remote, cost_of(remote, self.book), served=active))
        shared = [s for s in active if not s.usage]
        self._cpu_of_own_records([own for s in active for own in s.usage], cpu.seconds)
        for s in active:
            for own in s.usage:
                result.calls.append(StageCall(own, cost_of(own, self.book), own.call_id or new_id(), query=s))
            s.usage = []
            if not s.active and s.outcome_stage is None:
                s.outcome_stage = stage.name
        if shared:
            if len(shared) != len(active):
                rec.items = len(shared)
            weighted = self._split_by_work(rec, shared)
            if weighted:
                result.calls.extend(weighted)
                return
            result.calls.append(StageCall(rec, cost_of(rec, self.book), served=shared))

    def _split_by_work(self, rec: UsageRecord, shared: list[QueryState]) -> list[StageCall]:
        """A time-priced batch call whose stage said what each query made it do (``work``, query id -> units,
        e.g. the answer characters a guard read, an embed's tokens + its fixed part) is split by that, not
        evenly (``query_tokens``, query id -> tokens, puts each query's own on its row):
        one record per query with ``busy_share`` = its units / all units, the call's CPU once."""
        import dataclasses

        from ragcost.cost.pricebook import TimeResource

        work = rec.work
        if not isinstance(work, dict) or len(shared) < 2 or not isinstance(self.book.resources.get(rec.resource), TimeResource):
            return []
        units = [max(float(work.get(s.id) or 0.0), 0.0) for s in shared]
        total = sum(units)
        if total <= 0:
            return []
        tokens = rec.query_tokens
        cid = new_id()
        out = []
        for s, u in zip(shared, units):  # each row holds its own query's work, not every query's map
            own = dataclasses.replace(rec, items=1, shared_by=len(shared), busy_share=u / total, call_id=cid,
                                      work={s.id: u}, query_tokens=None, notes=dict(rec.notes))
            if tokens is not None:  # the query's own tokens (the stage counted them), not the batch's
                own.input_tokens = int(tokens.get(s.id) or 0)
            out.append(StageCall(own, cost_of(own, self.book), cid, query=s))
        return out


    def _cpu_of_own_records(self, records: list[UsageRecord], cpu_seconds: float) -> None:
        """Per-query records on a CPU-priced resource without CPU time get the call's measured CPU.

        Records of one busy period (one ``call_id``) share its CPU by their ``busy_share``; the
        periods split the call's CPU by their wall seconds (evenly when none took any), so the
        records together are charged the call's CPU once -- not wall time x the whole instance.
        """
        from ragcost.cost.pricebook import TimeResource

        periods: dict[str, list[UsageRecord]] = {}
        for r in records:
            res = self.book.resources.get(r.resource)
            if r.cpu_seconds is None and isinstance(res, TimeResource) and res.vcpus is not None:
                periods.setdefault(r.call_id or new_id(), []).append(r)
        if not periods:
            return
        walls = {cid: max(float(rs[0].wall_seconds), 0.0) for cid, rs in periods.items()}
        total = sum(walls.values())
        for cid, rs in periods.items():
            part = walls[cid] / total if total > 0 else 1.0 / len(periods)
            for r in rs:
                r.cpu_seconds = cpu_seconds * part
