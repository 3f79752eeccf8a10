"""The stage contract: validated params, cheap __init__, optional warm_up, one batch method."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ragcost.cost.usage import UsageRecord
from ragcost.registry import Registry

if TYPE_CHECKING:
    from ragcost.pipeline import Pipeline


class StageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Optional[str] = Field(None, description="label in reports; default: the stage type")
    resource: Optional[str] = Field(None, description="price-book resource; default: the pipeline's")


class Hit:
    """One retrieved chunk: label, document id and score, plus its title, text, chunk number and metadata.

    The retrieve stage may leave the last four to be read from the store on first use (``source``):
    one store call then fills every hit of that batch. Reading or setting any of them fills it first,
    so a guard's redaction is never overwritten by a late fill.
    """

    __slots__ = ("label", "doc_id", "score", "_title", "_text", "_chunk_no", "_metadata", "_source")

    def __init__(self, label: int, doc_id: str, score: float, title: str = "", text: str = "",
                 chunk_no: int = 0, metadata: Optional[dict[str, Any]] = None, source: Any = None) -> None:
        self.label = label
        self.doc_id = doc_id
        self.score = score
        self._title = title
        self._text = text
        self._chunk_no = chunk_no
        self._metadata = {} if metadata is None else metadata
        self._source = source  # a ChunkSource with .row(label) -> store row or None

    def _fill(self) -> None:
        src, self._source = self._source, None
        row = src.row(self.label)
        if row is not None:
            self._title = row.get("title") or ""
            self._text = row.get("text") or ""
            self._chunk_no = row.get("chunk_no") or 0
            self._metadata = dict(row.get("metadata") or {})

    def _field(name: str):  # noqa: N805 - a property factory used in the class body only
        slot = "_" + name

        def get(self: "Hit") -> Any:
            if self._source is not None:
                self._fill()
            return getattr(self, slot)

        def set_(self: "Hit", value: Any) -> None:
            if self._source is not None:
                self._fill()
            setattr(self, slot, value)

        return property(get, set_)

    title = _field("title")
    text = _field("text")
    chunk_no = _field("chunk_no")
    metadata = _field("metadata")
    del _field

    def _key(self) -> tuple:
        return (self.label, self.doc_id, self.score, self.title, self.text, self.chunk_no, self.metadata)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hit) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return f"Hit(label={self.label!r}, doc_id={self.doc_id!r}, score={self.score!r}, chunk_no={self.chunk_no!r})"


class QueryState:
    """One query as it flows through the stages.

    ``hits`` may be held as one row of a batch's result arrays (``set_ranked``) and built as
    ``Hit`` objects only when a stage or the caller first reads it.
    """

    def __init__(self, text: str, id: str = "", k: int = 10, filter: Optional[dict] = None,
                 vector: Optional[np.ndarray] = None, hits: Optional[list[Hit]] = None,
                 answer: Optional[str] = None, citations: Optional[list[str]] = None,
                 notes: Optional[dict[str, Any]] = None, error: Optional[str] = None) -> None:
        self.text = text
        self.id = id
        self.k = k
        self.filter = filter
        self.vector = vector
        self._hits: list[Hit] = [] if hits is None else hits
        self._ranked: Any = None  # (block, row): results not yet turned into Hit objects
        self.answer = answer
        self.citations: list[str] = [] if citations is None else citations
        self.notes: dict[str, Any] = {} if notes is None else notes  # per-query facts a stage reports (strategy, truncation)
        self.error = error

    @property
    def hits(self) -> list[Hit]:
        if self._ranked is not None:
            block, row = self._ranked
            self._ranked = None
            self._hits = block.hits(row)
        return self._hits

    @hits.setter
    def hits(self, value: list[Hit]) -> None:
        self._ranked = None
        self._hits = value

    def set_ranked(self, block: Any, row: int) -> None:
        """Hold row ``row`` of ``block`` (anything with ``.hits(row) -> list[Hit]`` and ``.count(row)``) as the hits."""
        self._ranked = (block, row)

    @property
    def hit_count(self) -> int:
        """len(hits), without building Hit objects."""
        if self._ranked is not None:
            return self._ranked[0].count(self._ranked[1])
        return len(self._hits)

    def __repr__(self) -> str:
        return f"QueryState(id={self.id!r}, text={self.text[:40]!r}, hits={self.hit_count}, error={self.error!r})"


class Stage(ABC):
    """A stage reports only what it alone knows (tokens, strategies, bytes) on the usage record."""

    type: ClassVar[str]
    Params: ClassVar[type[StageParams]] = StageParams

    def __init__(self, params: StageParams, pipeline: "Pipeline") -> None:
        self.params = params
        self.pipeline = pipeline

    @property
    def name(self) -> str:
        return self.params.name or self.type

    @property
    def resource(self) -> str:
        return self.params.resource or self.pipeline.config.resource

    def warm_up(self) -> None:
        """Load heavy things once, before the first batch."""

    @abstractmethod
    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        """Process a batch; fill ``usage`` with what only this stage knows."""


stage_registry: Registry[type[Stage]] = Registry("stage type")
