"""Embed the queries of a batch in one call (implicit first stage of every pipeline)."""

from __future__ import annotations

from ragcost.records import UsageRecord
from ragcost.embed.reduce import truncate
from ragcost.records import QueryState
from ragcost.stages.base import Stage


class EmbedQueries(Stage):
    type = "embed"

    def warm_up(self) -> None:
        self.ctx.embedder.warm_up()

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        emb = self.ctx.embedder
        texts = [s.text for s in batch]
        counts = emb.count_tokens(texts)
        limit = emb.max_tokens
        for s, n in zip(batch, counts):
            if n > limit:
                # The model reads only its window; say so rather than pretend the whole query counted.
                s.notes["truncated"] = f"query is {n} tokens; the model reads the first {limit}"
        usage.input_tokens = sum(min(n, limit) for n in counts)
        usage.cached_input_tokens = 0  # a local model has no prompt cache: known zero, not unknown
        full = emb.embed(texts)
        vecs = truncate(full, self.ctx.dim)
        for s, v in zip(batch, vecs):
            s.vector = v
        truncated = vecs.shape[1] < full.shape[1]
        for s, v in zip(batch, full):
            # Stages that re-score at the model's full dimension (rerank: rescore) read it here.
            s.full_vector = v if truncated else None
        return batch
