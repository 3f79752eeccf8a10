"""The Guard protocol: one method (``check``) over a batch of query states, registered by short name.

A guard only *finds*; the guard stage applies the policy (block, redact, flag, drop). A finding
never copies a detected personal value: ``match`` is left empty for PII so neither the notes,
the ledger nor a log line can carry it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional, Protocol

from pydantic import Field

from ragcost.config.base import Strict
from ragcost.cost.pricebook import PriceBook
from ragcost.embed.base import Embedder
from ragcost.records import QueryState
from ragcost.registry import Registry

Target = Literal["query", "context", "answer"]
Policy = Literal["block", "redact", "flag", "drop"]


class GuardContext(Protocol):
    """What a check may use (a StageContext has both): the embedder (grounded) and the price book (budget)."""

    @property
    def embedder(self) -> Embedder: ...

    @property
    def price_book(self) -> PriceBook: ...


class GuardParams(Strict):
    """Options of one check; every check adds its own fields (``extra="forbid"``)."""
    policy: Optional[Policy] = Field(None, description="overrides the stage's policy for this check")


@dataclass
class Finding:
    """One thing a check found in a query, a retrieved chunk (``hit`` = its index) or the answer."""

    check: str
    kind: str
    score: float
    on: str = "query"
    hit: Optional[int] = None
    span: Optional[tuple[int, int]] = None
    match: Optional[str] = None  # the matched text; None when it must not be copied (PII)
    reason: str = ""

    def note(self, doc_id: Optional[str] = None) -> dict[str, Any]:
        out: dict[str, Any] = {"check": self.check, "on": self.on, "kind": self.kind, "score": round(float(self.score), 4)}
        if doc_id is not None:
            out["doc_id"] = doc_id
        if self.span is not None:
            out["span"] = list(self.span)
        if self.match is not None:
            out["match"] = self.match
        if self.reason:
            out["reason"] = self.reason
        return out


class Guard(ABC):
    """A check; ``targets`` says where it can run, ``policies`` what the stage may do with a finding."""

    name: ClassVar[str]
    Params: ClassVar[type[GuardParams]] = GuardParams
    targets: ClassVar[tuple[str, ...]] = ("query", "context", "answer")
    policies: ClassVar[tuple[str, ...]] = ("block", "flag")
    default_policy: ClassVar[str] = "flag"
    # Its findings on an answer are the union of its findings on the answer's sentences: a server may
    # then release a held stream a sentence at a time (ragcost.serve.gate).
    per_sentence: ClassVar[bool] = False

    def __init__(self, params: GuardParams, ctx: Optional[GuardContext] = None) -> None:
        self.params = params
        self.ctx = ctx

    def warm_up(self) -> None:
        """Load heavy things once."""

    @abstractmethod
    def check(self, batch: list[QueryState], on: str) -> list[list[Finding]]:
        """Findings per state (same order as ``batch``)."""

    def stage_notes(self) -> dict[str, Any]:
        """What the last ``check`` call alone knows (e.g. sentences settled without a model), for the stage's notes."""
        return {}

    def redact(self, text: str) -> str:
        """The text with what this check finds replaced (only checks whose policies include redact)."""
        raise NotImplementedError(f"guard {self.name!r} cannot redact")


class TextGuard(Guard):
    """A guard that scans texts one by one: the query, each retrieved chunk, or the answer."""

    per_sentence = True  # a pattern found in an answer is found in its sentence

    @abstractmethod
    def scan(self, text: str) -> list[Finding]:
        """Findings in one text (``check``/``on``/``hit`` are filled in by :meth:`check`)."""

    def check(self, batch: list[QueryState], on: str) -> list[list[Finding]]:
        out: list[list[Finding]] = []
        for s in batch:
            found: list[Finding] = []
            for hit, text in targets_of(s, on):
                for f in self.scan(text):
                    f.check, f.on, f.hit = self.name, on, hit
                    found.append(f)
            out.append(found)
        return out


def targets_of(s: QueryState, on: str) -> list[tuple[Optional[int], str]]:
    """(hit index or None, text) pairs a check reads at ``on``."""
    if on == "query":
        return [(None, s.text)]
    if on == "answer":
        return [(None, s.answer)] if s.answer else []
    return [(i, f"{h.title}\n{h.text}" if h.title else h.text) for i, h in enumerate(s.hits)]


guard_registry: Registry[type[Guard]] = Registry("guard check")
