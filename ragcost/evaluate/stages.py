"""Extra stages in an eval grid (``rerank: {...}``): run over QueryStates holding the retrieved hits, as the pipeline does.

The hook: for a grid entry with ``rerank: PARAMS``, the class registered as ``stage_registry["rerank"]``
is built as ``cls(cls.Params(**PARAMS), ctx)``, warmed up once, and called
``stage.run(batch, usage)`` (after ``stage.keep_full_query_vectors(batch, full)`` when the stage
has it, as the embed stage does) on batches of ``BATCH`` QueryStates (text, id, k = the first k,
vector = the query at this config's dim, hits = the ``candidates`` retrieved documents, each
its best chunk with label, doc_id, score, title, text, chunk_no). The runner times each call
and prices it with ``cost_of``; the query's latency gains its share of the batch call. The
documents of the returned states' hits, in order, are the ranking that is scored.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any, Callable

import numpy as np

from ragcost.cost.usage import UsageRecord

BATCH = 32


class EvalContext:
    """What an extra stage sees as its ``pipeline`` during eval: the real pipeline, but
    ``artifact()`` is the index under test (with its labels and the float32 vectors at this dim),
    ``store()`` is the eval cache store (chunk texts), ``dim`` and ``index_config`` are this config's."""

    def __init__(self, pipeline: Any, loaded: Any, index_config: Any, dim: int) -> None:
        self._pipeline, self._loaded, self.index_config, self.dim = pipeline, loaded, index_config, dim

    def artifact(self) -> Any:
        return self._loaded

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipeline, name)


class StageRunner:
    """Runs one grid entry's extra stage for one configuration; chunk texts are fetched once and kept."""

    def __init__(self, corpus: Any, queries: dict[str, str], k: int,
                 vectors_at: Callable[[int], np.ndarray], queries_at: Callable[[int], np.ndarray]) -> None:
        self.corpus, self.queries, self.k = corpus, queries, k
        self.vectors_at, self.queries_at = vectors_at, queries_at
        self._rows: dict[int, dict] = {}

    def _chunks(self, labels: list[int]) -> dict[int, dict]:
        missing = [x for x in labels if x not in self._rows]
        if missing:
            for row in self.corpus.pipeline.store().chunks(missing):
                self._rows[row["label"]] = row
        return self._rows

    def _context(self, c: Any, index: Any) -> EvalContext:
        from ragcost.index.artifact import LoadedIndex, Manifest

        n = len(self.corpus.labels)
        manifest = Manifest(fingerprint={}, vector_count=n, dim=c.dim, precision=c.precision, backend=c.index_config.backend,
                            kind=c.index_config.kind, index_bytes=int(index.nbytes()), bytes_per_vector=index.nbytes() / max(n, 1),
                            file_bytes=0, index_file="", vectors_file="", labels_file="", build_seconds=0.0, created_at="")
        cfg = c.index_config.model_copy(update={"search": dict(c.search)})
        return EvalContext(self.corpus.pipeline, LoadedIndex(index, self.corpus.labels, self.vectors_at(c.dim), manifest), cfg, c.dim)

    def run(self, stage: tuple, c: Any, index: Any, got: list) -> tuple[dict, np.ndarray, list[UsageRecord]]:
        """(query id -> ranked doc ids, per-query seconds added, the stage's usage records)."""
        from ragcost.stages.base import Hit, QueryState

        cls, params = stage
        st = cls(params, self._context(c, index))
        st.warm_up()
        rows = self._chunks(sorted({int(x) for _, labs, _ in got for x in labs}))
        Q = self.queries_at(c.dim)
        doc_ids = self.corpus.doc_ids
        states = []
        for i, (q, (docs, labs, scores)) in enumerate(zip(self.queries, got)):
            hits = []
            for d, lab, s in zip(docs, labs, scores):
                row = rows.get(int(lab), {})
                hits.append(Hit(int(lab), doc_ids[d], float(s), row.get("title") or "", row.get("text", ""),
                                row.get("chunk_no", 0), row.get("metadata") or {}))
            states.append(QueryState(text=self.queries[q], id=q, k=self.k, vector=Q[i], hits=hits))
        per_query = np.zeros(len(states))
        records = []
        keep_full = getattr(st, "keep_full_query_vectors", None)  # what the pipeline's embed stage hands over
        full = self.queries_at(self.corpus.vectors.shape[1])
        for a in range(0, len(states), BATCH):
            batch = states[a:a + BATCH]
            rec = UsageRecord(stage=st.name, resource=st.resource, items=len(batch))
            if keep_full is not None:
                keep_full(batch, full[a:a + len(batch)])
            t0 = perf_counter()
            out = st.run(batch, rec)
            rec.wall_seconds = perf_counter() - t0
            per_query[a:a + len(batch)] = rec.wall_seconds / len(batch)
            records.append(rec)
            if out is not None:
                states[a:a + len(batch)] = out
        ranked = {s.id: list(dict.fromkeys(h.doc_id for h in s.hits)) for s in states}
        return ranked, per_query, records
