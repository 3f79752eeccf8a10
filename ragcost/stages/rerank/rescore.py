"""Exact re-scoring of the candidates on full-precision vectors kept beside a compressed index.

An IVF-PQ, int8 or binary index ranks by approximate scores; the artifact keeps float32 vectors
at the index's dimension, so re-scoring the candidates with them is exact. When the index is
truncated (``embed.dim`` below the model's), the full-dimension vectors come from the store (one
query per batch, only the candidates' rows) and the query's full vector from the embed stage,
which keeps it in ``QueryState.full_vector`` (or, when this stage runs alone, one embed call here).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ragcost.stages.rerank.base import Reranker, RerankerParams, reranker_registry



class RescoreParams(RerankerParams):
    source: Literal["auto", "artifact", "store"] = Field(
        "auto", description="auto: the artifact's float32 vectors at full dimension, else the store's full-dimension vectors")


@reranker_registry.register("rescore")
class Rescore(Reranker):
    name = "rescore"
    Params = RescoreParams

    def warm_up(self) -> None:
        self.ctx.artifact()

    def _source(self, art) -> str:
        if self.params.source != "auto":
            return self.params.source
        return "store" if art.manifest.dim < self.ctx.embedder.native_dim else "artifact"

    def rerank(self, batch, usage) -> None:
        art = self.ctx.artifact()
        source = self._source(art)
        labels = sorted({h.label for s in batch for h in s.hits})
        if source == "artifact":
            from ragcost.index.exact import rows_for_labels

            rows = rows_for_labels(art.labels, np.array(labels, np.int64))
            mat = np.asarray(art.vectors[rows], dtype=np.float32)
            vecs = {int(l): v for l, v in zip(art.labels[rows], mat)}
            queries = {id(s): np.asarray(s.vector, np.float32) for s in batch}
        else:
            vecs = self.ctx.store().vectors_for(labels)
            queries = self._full_queries(batch, usage)
        scored = 0
        for s in batch:
            q = queries[id(s)]
            for h in s.hits:
                v = vecs.get(h.label)
                if v is not None and v.shape[0] == q.shape[0]:
                    h.score = float(v @ q)
                    scored += 1
        usage.bytes += sum(v.nbytes for v in vecs.values())
        usage.notes["rerank"] = {"scored": scored, "batches": 1 if scored else 0}
        usage.notes["source"] = source

    def _full_queries(self, batch, usage) -> dict[int, np.ndarray]:
        out = {id(s): s.full_vector for s in batch if s.full_vector is not None}
        missing = [s for s in batch if s.full_vector is None]
        if missing:  # run alone (no embed stage handed the full vectors over): embed here, once
            full = self.ctx.embedder.embed([s.text for s in missing])
            out.update({id(s): v for s, v in zip(missing, full)})
            usage.notes["query_embedded"] = {"queries": len(missing)}
        return out
