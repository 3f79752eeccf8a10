"""The one runner: ``ragcost query`` and ``ragcost eval`` both run stages through it.

It times every stage call (wall seconds for latency, and process CPU seconds -- all threads,
``time.process_time`` -- which CPU resources are priced by), counts items and calls, prices it from the price book
(``ragcost.cost.compute``, the one place cost is computed) and keeps which queries each call
served, so the ledger charges a batch call only to those queries. A stage that reports
per-query records (``QueryState.usage``: generate attempts) has those priced instead of the
query's share of the call. Queries that a stage finished, blocked or failed skip later stages;
their outcome and the stage that decided it stay on the state for the ledger.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from time import perf_counter, process_time
from typing import Optional, Sequence

from ragcost.cost.compute import cost_of
from ragcost.cost.pricebook import PriceBook
from ragcost.errors import RagcostError, StageError
from ragcost.records import QueryState, UsageRecord
from ragcost.stages.base import Stage


def new_call_id() -> str:
    return uuid.uuid4().hex


@dataclass
class StageCall:
    """One priced usage record and the queries it served."""

    record: UsageRecord
    cost_usd: float
    call_id: str = field(default_factory=new_call_id)
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
        c0, t0 = process_time(), perf_counter()
        try:
            stage.run(active, rec)
        except RagcostError:
            raise
        except Exception as e:  # a stage bug or a library failure: recorded, named, and raised
            _measured(rec, t0, c0)
            rec.failures += 1
            result.calls.append(StageCall(rec, cost_of(rec, self.book), served=active))
            raise StageError(f"stage {stage.name!r} failed: {type(e).__name__}: {e}") from e
        _measured(rec, t0, c0)
        shared = [s for s in active if not s.usage]
        for s in active:
            for own in s.usage:
                result.calls.append(StageCall(own, cost_of(own, self.book), own.call_id or new_call_id(), query=s))
            s.usage = []
            if not s.active and s.outcome_stage is None:
                s.outcome_stage = stage.name
        if shared:
            if len(shared) != len(active):
                rec.items = len(shared)
            result.calls.append(StageCall(rec, cost_of(rec, self.book), served=shared))


def _measured(rec: UsageRecord, t0: float, c0: float) -> None:
    """Wall and process CPU time (every thread) since (t0, c0): the runner measures, never the stage."""
    rec.wall_seconds = perf_counter() - t0
    rec.cpu_seconds = max(process_time() - c0, 0.0)
