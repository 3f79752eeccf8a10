"""Extra stages in an eval grid (``rerank: {...}``), run by the same runner as `ragcost query`.

For a grid entry with ``rerank: PARAMS`` the registered ``rerank`` stage is built as
``cls(cls.Params(**PARAMS), ctx)`` with an :class:`EvalStageContext` (the index under test, the
eval cache's store), warmed up once, and run by :class:`ragcost.runtime.runner.Runner` on
batches of ``BATCH`` QueryStates (text, id, k = the first k, vector at this config's dim,
``full_vector`` at the model's, hits = the ``candidates`` retrieved documents, each its best
chunk). The runner times and prices each call; a query's latency gains its share of the
batch call. The documents of the returned states' hits, in order, are the ranking scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.cost.pricebook import PriceBook
from ragcost.index.artifact import LoadedIndex, Manifest
from ragcost.records import Hit, QueryState, UsageRecord
from ragcost.runtime.runner import RunResult, Runner

BATCH = 32


class EvalStageContext:
    """The StageContext of a stage under evaluation, explicitly: the index under test with its
    labels and float32 vectors at this config's dim, the eval cache's store (chunk texts), and
    the pipeline's embedder, price book and resource."""

    def __init__(self, pipeline: Any, cache: Any, loaded: LoadedIndex, index_config: IndexConfig, dim: int) -> None:
        self._pipeline, self._cache, self._loaded = pipeline, cache, loaded
        self._index_config, self._dim = index_config, dim
        self._shared: dict[str, Any] = {}

    @property
    def path(self) -> Path:
        return self._pipeline.path

    @property
    def base(self) -> Path:
        return self._pipeline.base

    @property
    def resource(self) -> str:
        return self._pipeline.resource

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def index_config(self) -> IndexConfig:
        return self._index_config

    @property
    def index_dir(self) -> Path:
        return self._cache.index_dir

    @property
    def price_book(self) -> PriceBook:
        return self._pipeline.price_book

    @property
    def embedder(self) -> Any:
        return self._pipeline.embedder

    def store(self) -> Any:
        return self._cache.store()

    def artifact(self) -> LoadedIndex:
        return self._loaded

    def stage_params(self) -> list[dict[str, Any]]:
        return self._pipeline.stage_params()

    def shared(self) -> dict[str, Any]:
        return self._shared  # this configuration's stages only


class StageRunner:
    """Runs one grid entry's extra stage for one configuration; chunk texts are fetched once and kept."""

    def __init__(self, pipeline: Any, corpus: Any, queries: dict[str, str], k: int,
                 vectors_at: Callable[[int], np.ndarray], queries_at: Callable[[int], np.ndarray]) -> None:
        self.pipeline, self.corpus, self.queries, self.k = pipeline, corpus, queries, k
        self.vectors_at, self.queries_at = vectors_at, queries_at
        self._rows: dict[int, dict] = {}
        self.last_scores: dict[str, dict[str, float]] = {}  # the last run's final score per (query, document)

    def _chunks(self, labels: list[int]) -> dict[int, dict]:
        missing = [x for x in labels if x not in self._rows]
        if missing:
            for row in self.corpus.pipeline.store().chunks(missing):
                self._rows[row["label"]] = row
        return self._rows

    def _context(self, c: Any, index: Any) -> EvalStageContext:
        n = len(self.corpus.labels)
        manifest = Manifest(fingerprint={}, vector_count=n, dim=c.dim, precision=c.precision, backend=c.index_config.backend,
                            kind=c.index_config.kind, index_bytes=int(index.nbytes()), bytes_per_vector=index.nbytes() / max(n, 1),
                            file_bytes=0, index_file="", vectors_file="", labels_file="", build_seconds=0.0, created_at="")
        cfg = c.index_config.model_copy(update={"search": dict(c.search)})
        loaded = LoadedIndex(index, self.corpus.labels, self.vectors_at(c.dim), manifest)
        return EvalStageContext(self.pipeline, self.corpus.pipeline, loaded, cfg, c.dim)

    def _states(self, c: Any, got: list) -> list[QueryState]:
        rows = self._chunks(sorted({int(x) for _, labs, _ in got for x in labs}))
        Q, full = self.queries_at(c.dim), self.queries_at(self.corpus.vectors.shape[1])
        truncated = Q.shape[1] < full.shape[1]
        doc_ids = self.corpus.doc_ids
        states = []
        for i, (q, (docs, labs, scores)) in enumerate(zip(self.queries, got)):
            hits = []
            for d, lab, s in zip(docs, labs, scores):
                row = rows.get(int(lab), {})
                hits.append(Hit(int(lab), doc_ids[d], float(s), row.get("title") or "", row.get("text", ""),
                                row.get("chunk_no", 0), row.get("metadata") or {}))
            st = QueryState(text=self.queries[q], id=q, k=self.k, vector=Q[i], hits=hits)
            st.full_vector = full[i] if truncated else None
            states.append(st)
        return states

    def run(self, stage: tuple | list[tuple], c: Any, index: Any, got: list) -> tuple[dict, np.ndarray, list[UsageRecord]]:
        """(query id -> ranked doc ids, per-query seconds added, the stages' usage records).

        ``stage``: one (class, params), or a list of them run in order (`eval --ablate` runs the
        pipeline's stages after retrieval); a query a stage blocks or fails delivers no documents."""
        specs = stage if isinstance(stage, list) else [stage]
        ctx = self._context(c, index)
        built = [cls(params, ctx) for cls, params in specs]
        for st in built:
            st.warm_up()
        states = self._states(c, got)
        runner = Runner(built, self.pipeline.price_book)
        per_query = np.zeros(len(states))
        records: list[UsageRecord] = []
        for a in range(0, len(states), BATCH):
            batch = states[a:a + BATCH]
            res: RunResult = runner.run(batch)
            for call in res.calls:
                records.append(call.record)
                share = call.record.wall_seconds / max(call.record.items, 1)
                for j, s in enumerate(batch):
                    if call.serves(s):
                        per_query[a + j] += share
        ranked = {s.id: list(dict.fromkeys(h.doc_id for h in s.hits)) if s.ok else [] for s in states}
        self.last_scores = {s.id: _best_scores(s.hits) for s in states}
        return ranked, per_query, records


def _best_scores(hits: list[Hit]) -> dict[str, float]:
    """Each document's best chunk score after the stage (the score the query-time judge compares)."""
    out: dict[str, float] = {}
    for h in hits:
        if h.score is not None and (h.doc_id not in out or h.score > out[h.doc_id]):
            out[h.doc_id] = float(h.score)
    return out
