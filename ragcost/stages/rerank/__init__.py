"""Batch re-ranking as a costed stage: one stage type ``rerank``, a ``backend`` registered by name.

```yaml
- {type: rerank, backend: cross-encoder, model: ./models/my-cross-encoder, top_n: 5, batch_size: 32}
- {type: rerank, backend: rescore, top_n: 10}          # exact scores on full vectors beside a compressed index
- {type: rerank, backend: hybrid, sparse_k: 100, rrf_k: 60}   # BM25 fused with the dense hits (RRF)
```

The stage re-orders ``s.hits`` (and keeps ``top_n``); ``Hit.score`` becomes the backend's score:
the cross-encoder's (sigmoid for a one-label model), the exact cosine, or the fused RRF score.
It reports ``usage.notes["rerank"] = {"scored": pairs, "batches": n}``; the runner times and prices it.
Usable alone: ``Rerank(Rerank.Params(backend="rescore"), pipeline).run(states, usage)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ragcost.cost.usage import UsageRecord
from ragcost.registry import Registry
from ragcost.stages.base import Hit, QueryState, Stage, StageParams, stage_registry

if TYPE_CHECKING:
    from ragcost.pipeline import Pipeline


class RerankerParams(BaseModel):
    """Options every backend shares; each backend adds its own (``extra="forbid"``)."""

    model_config = ConfigDict(extra="forbid")
    top_n: Optional[int] = Field(None, ge=1, description="hits kept after re-ranking; default: as many as came in")


class Reranker(ABC):
    """One method does the work: ``rerank`` re-scores and re-orders the hits of a batch in place."""

    name: ClassVar[str]
    Params: ClassVar[type[RerankerParams]] = RerankerParams

    def __init__(self, params: RerankerParams, pipeline: "Pipeline") -> None:
        self.params = params
        self.pipeline = pipeline

    def warm_up(self) -> None:
        """Load models or indexes once."""

    @abstractmethod
    def rerank(self, batch: list[QueryState], usage: UsageRecord) -> None:
        """Set new scores on ``s.hits`` and report ``usage.notes["rerank"]``; the stage sorts and cuts."""


reranker_registry: Registry[type[Reranker]] = Registry("rerank backend")


class RerankParams(StageParams):
    """``backend`` plus that backend's own options, given flat in the stage's YAML."""

    model_config = ConfigDict(extra="allow")
    backend: str = Field("cross-encoder", description="cross-encoder | rescore | hybrid")

    @model_validator(mode="after")
    def _backend_options(self) -> "RerankParams":
        self.backend_params()
        return self

    def backend_params(self) -> RerankerParams:
        if self.backend not in reranker_registry:
            raise ValueError(f"unknown rerank backend {self.backend!r}; known: {', '.join(reranker_registry.names())}")
        cls = reranker_registry.get(self.backend)
        try:
            return cls.Params.model_validate(dict(self.model_extra or {}))
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            known = ", ".join(cls.Params.model_fields)
            raise ValueError(f"backend {self.backend!r}: {loc}: {err['msg']} (its options: {known})") from None


@stage_registry.register("rerank")
class Rerank(Stage):
    type = "rerank"
    Params = RerankParams

    def __init__(self, params: RerankParams, pipeline: "Pipeline") -> None:
        super().__init__(params, pipeline)
        self.backend = reranker_registry.get(params.backend)(params.backend_params(), pipeline)

    @property
    def name(self) -> str:
        return self.params.name or f"rerank:{self.params.backend}"

    def warm_up(self) -> None:
        self.backend.warm_up()

    def keep_full_query_vectors(self, batch: list[QueryState], full: np.ndarray) -> None:
        """Called by the embed stage with the untruncated query vectors (used by ``rescore``)."""
        keep = getattr(self.backend, "keep_full_query_vectors", None)
        if keep is not None:
            keep(batch, full)

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        self.backend.rerank(batch, usage)
        top_n = self.backend.params.top_n
        for s in batch:
            s.hits = sort_hits(s.hits)[:top_n] if top_n else sort_hits(s.hits)
        usage.notes.setdefault("rerank", {"scored": 0, "batches": 0})
        return batch


def sort_hits(hits: list[Hit]) -> list[Hit]:
    """Best score first; ties keep the order they came in (a stable sort)."""
    return sorted(hits, key=lambda h: -h.score)


def batches(n: int, size: int) -> int:
    return -(-n // size) if n else 0


def _hit_from_row(r: dict[str, Any], score: float) -> Hit:
    """A Hit from a ``Store.chunks`` row."""
    return Hit(int(r["label"]), r["doc_id"], float(score), r.get("title") or "", r["text"], r.get("chunk_no", 0), r.get("metadata") or {})


__all__ = ["Rerank", "RerankParams", "Reranker", "RerankerParams", "reranker_registry", "sort_hits"]

# The built-in backends register on import (after the names above exist, which they import).
from ragcost.stages.rerank import cross_encoder as _cross_encoder  # noqa: E402,F401
from ragcost.stages.rerank import hybrid as _hybrid  # noqa: E402,F401
from ragcost.stages.rerank import rescore as _rescore  # noqa: E402,F401
