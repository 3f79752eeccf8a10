"""The Router protocol: one method (``decide``) picks a route target per query of a batch; registered by name.

A router never sends a query anywhere itself: the ``route`` stage branches each query to the
target its router decided, or to the stage's ``default`` when the router could not decide (and
says so in the ledger).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Optional

from ragcost.config.base import Strict
from ragcost.context import StageContext
from ragcost.records import QueryState
from ragcost.registry import Registry


@dataclass
class Decision:
    """One query's route: ``target`` (None: undecided), the ``score`` it rests on, and why."""

    target: Optional[str]
    score: Optional[float]
    reason: str


class RouterParams(Strict):
    """Options every router shares; each router adds its own (``extra="forbid"``)."""


class Router(ABC):
    """Decides a route target per query from what the pipeline already computed (text, vector, hits)."""

    name: ClassVar[str]
    Params: ClassVar[type[RouterParams]] = RouterParams

    def __init__(self, params: RouterParams, ctx: StageContext) -> None:
        self.params = params
        self.ctx = ctx

    @classmethod
    def targets_named(cls, params: RouterParams) -> list[tuple[tuple, str]]:
        """(where in the router's options, target) of every target these options name; checked at load."""
        return []

    @classmethod
    def check_files(cls, params: RouterParams, base: Path, targets: list[str],
                    where: Callable[[tuple], str] = lambda loc: ".".join(map(str, loc))) -> None:
        """Read and check the files the options name (a labelled file), raising ConfigError with file:line;
        ``where(("examples",))`` is the pipeline's ``file:line: field`` of an option, for a file not found."""

    def warm_up(self) -> None:
        """Load what deciding needs (embed the labelled examples) once, before the first batch."""

    @abstractmethod
    def decide(self, batch: list[QueryState]) -> list[Decision]:
        """One decision per query of the batch, in order."""


router_registry: Registry[type[Router]] = Registry("router")
