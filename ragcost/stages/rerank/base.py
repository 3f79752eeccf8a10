"""The Reranker protocol: one method (``rerank``) re-scores the hits of a batch in place; registered by name."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Optional

from pydantic import Field

from ragcost.config.base import Strict
from ragcost.context import StageContext
from ragcost.records import Hit, QueryState, UsageRecord
from ragcost.registry import Registry


class RerankerParams(Strict):
    """Options every backend shares; each backend adds its own (``extra="forbid"``)."""

    top_n: Optional[int] = Field(None, ge=1, description="hits kept after re-ranking; default: as many as came in")

    # Options that change no score (how many are kept, how fast they are computed): left out of what a
    # calibration fit on this backend's scores is valid for.
    not_scoring: ClassVar[frozenset[str]] = frozenset({"top_n"})


class Reranker(ABC):
    """Re-scores hits; the rerank stage sorts and cuts. ``score_scale`` says what its scores mean
    (``cosine`` in [-1, 1], ``probability`` in [0, 1], ``logit``, ``rrf``), for the useful-document judge."""

    name: ClassVar[str]
    Params: ClassVar[type[RerankerParams]] = RerankerParams
    score_scale: ClassVar[str] = "cosine"

    def __init__(self, params: RerankerParams, ctx: StageContext) -> None:
        self.params = params
        self.ctx = ctx

    @classmethod
    def scale_of(cls, params: RerankerParams) -> tuple[str, float, float, str]:
        """(name, lowest, highest, what) of the scores this backend gives with these params."""
        lo, hi = {"cosine": (-1.0, 1.0), "probability": (0.0, 1.0)}.get(cls.score_scale, (-math.inf, math.inf))
        return cls.score_scale, lo, hi, cls.score_scale

    def warm_up(self) -> None:
        """Load models or indexes once."""

    def prepare(self) -> Optional[str]:
        """Build an index the backend keeps beside the vector index, at index time (see Stage.prepare)."""
        return None

    @abstractmethod
    def rerank(self, batch: list[QueryState], usage: UsageRecord) -> None:
        """Set new scores on ``s.hits`` and report ``usage.notes["rerank"]``."""


reranker_registry: Registry[type[Reranker]] = Registry("rerank backend")


def sort_hits(hits: list[Hit]) -> list[Hit]:
    """Best score first; ties keep the order they came in (a stable sort)."""
    return sorted(hits, key=lambda h: -h.score)


def batches(n: int, size: int) -> int:
    return -(-n // size) if n else 0


def hit_from_row(r: dict[str, Any], score: float) -> Hit:
    """A Hit from a ``DocumentStore.chunks`` row."""
    return Hit(int(r["label"]), r["doc_id"], float(score), r.get("title") or "", r["text"], r.get("chunk_no", 0), r.get("metadata") or {})
