"""Batch re-ranking as a costed stage: one stage type ``rerank``, a ``backend`` registered by name.

```yaml
- {type: rerank, backend: cross-encoder, model: ./models/my-cross-encoder, top_n: 5, batch_size: 32}
- {type: rerank, backend: rescore, top_n: 10}          # exact scores on full vectors beside a compressed index
- {type: rerank, backend: hybrid, sparse_k: 100, rrf_k: 60}   # BM25 fused with the dense hits (RRF)
```

The stage re-orders ``s.hits`` (and keeps ``top_n``); ``Hit.score`` becomes the backend's score:
the cross-encoder's (sigmoid for a one-label model), the exact cosine, or the fused RRF score.
It reports ``usage.notes["rerank"] = {"scored": pairs, "batches": n}``; the runner times and prices it.
Usable alone: ``Rerank(Rerank.Params(backend="rescore"), ctx).run(states, usage)``.
"""

from __future__ import annotations

from typing import Optional

from pydantic import ConfigDict, Field, ValidationError, model_validator

from ragcost.config.base import one_line
from ragcost.records import QueryState, UsageRecord
from ragcost.stages.base import ScoreScale, Stage, StageParams, stage_registry
from ragcost.stages.rerank.base import RerankerParams, reranker_registry, sort_hits


class RerankParams(StageParams):
    """``backend`` plus that backend's own options, given flat in the stage's YAML."""

    model_config = ConfigDict(extra="allow")
    backend: str = Field("cross-encoder", description="a registered rerank backend: cross-encoder | rescore | hybrid")

    @model_validator(mode="after")
    def _backend_options(self) -> "RerankParams":
        self.backend_params()
        return self

    def scoring_fingerprint(self) -> dict:
        """What a calibration fit on this stage's scores is valid for: the backend, its model, and each
        option that changes a score and is set away from its default (``options``, absent when none is)."""
        bp = self.backend_params()
        out = {"backend": self.backend, "model": getattr(bp, "model", None)}
        options = bp.model_dump(mode="json", exclude_defaults=True, exclude=set(type(bp).not_scoring) | {"model"})
        if options:
            out["options"] = options
        return out

    def backend_params(self) -> RerankerParams:
        if self.backend not in reranker_registry:
            raise ValueError(f"unknown rerank backend {self.backend!r}; installed: {reranker_registry.known()}")
        cls = reranker_registry.get(self.backend)
        try:
            return cls.Params.model_validate(dict(self.model_extra or {}))
        except ValidationError as e:
            raise ValueError(f"backend {self.backend!r}: {one_line(e, known=list(cls.Params.model_fields))}") from None


@stage_registry.register("rerank")
class Rerank(Stage):
    type = "rerank"
    Params = RerankParams
    reorders_hits = True
    optional = True

    @classmethod
    def final_k(cls, params: RerankParams) -> Optional[int]:
        top_n = getattr(params, "top_n", None)
        return top_n if isinstance(top_n, int) else None

    @classmethod
    def label(cls, params: RerankParams) -> str:
        return params.name or params.backend

    def __init__(self, params: RerankParams, ctx) -> None:
        super().__init__(params, ctx)
        self.backend = reranker_registry.get(params.backend)(params.backend_params(), ctx)

    @property
    def name(self) -> str:
        return self.params.name or f"rerank:{self.params.backend}"

    @classmethod
    def scale_of(cls, params: RerankParams) -> ScoreScale:
        name, lo, hi, note = reranker_registry.get(params.backend).scale_of(params.backend_params())
        return ScoreScale(name, lo, hi, note)

    def warm_up(self) -> None:
        self.backend.warm_up()

    def prepare(self) -> Optional[str]:
        return self.backend.prepare()

    final = True  # the pipeline's last re-rank (set False on earlier ones): it cuts to a requested k

    def kept(self, s: QueryState) -> Optional[int]:
        """Hits this stage keeps for a query: its top_n; a request's k (``s.keep``) in the last re-rank, at least
        that many in an earlier one. None: all."""
        top_n = self.backend.params.top_n
        if s.keep is None:
            return top_n
        if self.final:
            return s.keep
        return None if top_n is None else max(top_n, s.keep)

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        self.backend.rerank(batch, usage)
        for s in batch:
            n = self.kept(s)
            s.hits = sort_hits(s.hits)[:n] if n else sort_hits(s.hits)
        usage.notes.setdefault("rerank", {"scored": 0, "batches": 0})
        return batch
