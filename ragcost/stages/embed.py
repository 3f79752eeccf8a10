"""Embed the queries of a batch in one call (implicit first stage of every pipeline).

A batch's CPU is split over its queries by what each gave the model: its tokens plus the call's
fixed cost (:attr:`ragcost.embed.base.Embedder.split_fixed_tokens`, measured per backend). Tokens
alone would charge a short query too little: most of a short query's CPU alone is the call's fixed
part (``python -m bench.embed_split``)."""

from __future__ import annotations

from ragcost.records import UsageRecord
from ragcost.embed.reduce import query_vectors
from ragcost.records import QueryState
from ragcost.stages.base import Stage


class EmbedQueries(Stage):
    type = "embed"
    embeds_queries = True

    def warm_up(self) -> None:
        emb = self.ctx.embedder
        getattr(emb, "warm_up_queries", emb.warm_up)()  # a query process loads only what embedding a query needs

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        emb = self.ctx.embedder
        texts = [s.text for s in batch]
        counts = emb.count_tokens(texts)
        limit = emb.max_tokens
        for s, n in zip(batch, counts):
            if n > limit:
                # The model reads only its window; say so rather than pretend the whole query counted.
                s.truncated = f"query is {n} tokens; the model reads the first {limit}"
        read = [min(n, limit) for n in counts]
        usage.input_tokens = sum(read)
        c = emb.split_fixed_tokens
        if c is not None and len(batch) > 1:
            # Each query's part of the batch's CPU: its tokens plus the call's fixed cost, in token-equivalents
            # (the runner splits the call by it); its own tokens go on its own row.
            usage.work = {s.id: n + c for s, n in zip(batch, read)}
            usage.query_tokens = {s.id: n for s, n in zip(batch, read)}
        usage.cached_input_tokens = 0  # a local model has no prompt cache: known zero, not unknown
        vecs, full = query_vectors(emb, texts, self.ctx.dim)
        for s, v in zip(batch, vecs):
            s.vector = v
        truncated = vecs.shape[1] < full.shape[1]
        for s, v in zip(batch, full):
            # Stages that re-score at the model's full dimension (rerank: rescore) read it here.
            s.full_vector = v if truncated else None
        return batch
