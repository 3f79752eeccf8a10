"""The stage contract: validated params, a cheap ``__init__(params, ctx)``, optional ``warm_up``, one batch method.

A stage gets a :class:`~ragcost.context.StageContext` (store, index, embedder, price book ...),
never the pipeline. It reads and writes declared fields of :class:`~ragcost.records.QueryState`
and ends a query's trip explicitly: ``s.finish(...)`` (answered early), ``s.branch(...)``
(picked a generate target), ``s.block(...)`` (refused) or ``s.fail(...)``; the runner skips
queries that are no longer ``active`` and records each outcome in the ledger.

The runner measures (wall seconds, items, calls) and prices; a stage reports on ``usage`` only
what it alone knows (tokens, retries, strategies, bytes). A stage whose work is per query
(generate attempts) appends that query's own records to ``s.usage`` instead.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Optional

from pydantic import Field

from ragcost.config.base import Strict
from ragcost.context import StageContext
from ragcost.records import QueryState, UsageRecord
from ragcost.registry import Registry


class StageParams(Strict):
    name: Optional[str] = Field(None, description="label in reports; default: the stage type")
    resource: Optional[str] = Field(None, description="price-book resource; default: the pipeline's")
    target: Optional[str] = Field(None, description="run only on queries a route stage sent to this target (e.g. small); default: every query")


@dataclass(frozen=True)
class ScoreScale:
    """What a stage's scores mean: ``name`` (cosine, rrf, logit, probability) and the range they can take."""

    name: str
    lo: float = -math.inf
    hi: float = math.inf
    note: str = ""


COSINE = ScoreScale("cosine", -1.0, 1.0, "cosine similarity")


class Stage(ABC):
    """One kind of work over a batch of queries."""

    type: ClassVar[str]
    Params: ClassVar[type[StageParams]] = StageParams
    # Where in a pipeline the stage may stand: "any", or "before-generate" (a cache must answer
    # before the money is spent). The loader refuses a stage placed where it cannot work.
    placement: ClassVar[str] = "any"
    # What the stage's scores mean when it sets Hit.score (None: it does not score). The
    # useful-document judge checks its threshold against the last scoring stage's scale.
    score_scale: ClassVar[Optional[ScoreScale]] = None

    # ---- what the stage can do: declared, so the runtime, serve, eval and the CLI never compare type
    # strings (a plugin's stage opts in by setting them; tests/test_capabilities.py holds the rule) ----
    embeds_queries: ClassVar[bool] = False  # turns the query text into its vector (the implicit first stage)
    fetches_hits: ClassVar[bool] = False  # fills the hits from the index; a re-ranker after it widens its k
    reorders_hits: ClassVar[bool] = False  # re-ranks the hits fetched before it, keeping ``final_k`` of them
    makes_answer: ClassVar[bool] = False  # generates the answer (streams it; has ``generators``)
    remembers_queries: ClassVar[bool] = False  # keeps state across queries (a cache): warm-up queries would change it
    optional: ClassVar[bool] = False  # the pipeline answers without it: ``eval --ablate`` measures what it buys
    eval_skips: ClassVar[Optional[str]] = None  # why eval does not run it (its effect needs traffic or generation)

    @classmethod
    def scale_of(cls, params: StageParams) -> Optional[ScoreScale]:
        """The scale of the scores this stage (with these params) gives; None when it does not score."""
        return cls.score_scale

    @classmethod
    def final_k(cls, params: StageParams) -> Optional[int]:
        """How many hits the stage leaves (retrieve: its k; a re-rank: its top_n); None when it does not cut them."""
        return None

    @classmethod
    def answer_checks(cls, params: StageParams) -> list[str]:
        """The names of the checks it runs on the answer (a guard on: answer); none for most stages."""
        return []

    @classmethod
    def label(cls, params: StageParams) -> str:
        """What reports call the stage: its name, else what it is (a re-ranker's backend, a guard's checks)."""
        return getattr(params, "name", None) or cls.type

    def holds_answer(self) -> bool:
        """Whether it may block or rewrite the answer after it is made: a stream is held until the answer passed."""
        return False

    def sentence_checks(self) -> Optional[list]:
        """The checks a held stream may release a sentence at a time (each passed sentence sent at once); None when
        the stream must be held whole. Most stages check nothing: []."""
        return []

    def __init__(self, params: StageParams, ctx: StageContext) -> None:
        self.params = params
        self.ctx = ctx

    @property
    def name(self) -> str:
        return self.params.name or self.type

    @property
    def resource(self) -> str:
        return self.params.resource or self.ctx.resource

    def accepts(self, s: QueryState) -> bool:
        """Whether this stage runs on ``s``: a stage with a ``target`` serves only the queries routed to it."""
        target = getattr(self.params, "target", None)
        return target is None or s.route == target

    def warm_up(self) -> None:
        """Load heavy things once, before the first batch."""

    def prepare(self) -> Optional[str]:
        """Build what the stage keeps beside the index from the stored chunks (`ragcost index` calls it after the
        index is built, so the first query loads it instead of building it); a line saying what it built, or
        None when it keeps nothing. Most stages keep nothing."""
        return None

    def close(self) -> None:
        """Write out what the stage still holds (the pipeline is closing); most stages hold nothing."""

    @abstractmethod
    def run(self, batch: list[QueryState], usage: UsageRecord) -> Optional[list[QueryState]]:
        """Process the batch's active queries in place; fill ``usage`` with what only this stage knows."""


stage_registry: Registry[type[Stage]] = Registry("stage type")
