"""What a loaded pipeline keeps, in bytes and dollars: the index, the exact-scan copy as far as it is resident,
the BM25 folders, the grounded check's sentence vectors and the store's own tables, by the one storage formula.

A mixin of :class:`ragcost.runtime.pipeline.Pipeline`: it reads the pipeline's ``config``, ``artifact()``,
``stages()``, ``store()`` and ``price_book``, and keeps what it measured on the pipeline.
"""

from __future__ import annotations

from typing import Any, Optional

RESIDENT_EVERY_S = 1.0  # how often the exact-scan copy's residency is re-read (/proc/self/smaps takes milliseconds)


class PipelineStorage:
    config: Any
    price_book: Any
    _storage: Optional[tuple[int, int]]
    _resident: Optional[tuple[float, Optional[int]]]

    def storage_bytes(self) -> tuple[int, int]:
        """(RAM, disk) bytes by the one storage formula (:mod:`ragcost.cost.storage`): the index, the
        exact-scan copy unless the index holds it (as far as it is resident in this process: a
        memory-mapped file is read on use), the BM25 index of a hybrid stage, the store's tables.
        The folders and tables are measured once per loaded pipeline, the copy's residency at most once a second."""
        import time

        from ragcost.cost.storage import holds_float32, mapped_resident_bytes, storage_bytes

        m = self.artifact().manifest
        holds = holds_float32(m.backend, m.kind, m.precision)
        if self._storage is None:
            # the grounded check's sentence vectors are charged as the BM25 folder is: RAM and disk
            self._storage = (self.bm25_bytes() + self.sentence_bytes(), self.store_bytes())
        if holds:
            resident = None
        elif self._resident is not None and time.monotonic() - self._resident[0] < RESIDENT_EVERY_S:
            resident = self._resident[1]
        else:  # the mapped exact-scan copy: RAM as far as it is resident now (re-measured at most once a second)
            resident = mapped_resident_bytes(self.config.index_path / m.vectors_file)
            self._resident = (time.monotonic(), resident)
        extra, store = self._storage
        return storage_bytes(m.index_bytes, m.vector_count, m.dim, m.file_bytes, holds_vectors=holds, bm25_bytes=extra,
                             store_bytes=store, copy_resident=resident)

    def bm25_bytes(self) -> int:
        """The BM25 folder of each hybrid re-rank stage (0 without one)."""
        from ragcost.stages.rerank.hybrid import Hybrid
        from ragcost.stages.rerank.stage import Rerank

        return sum(st.backend.index_bytes() for st in self.stages() if isinstance(st, Rerank) and isinstance(st.backend, Hybrid))

    def sentence_bytes(self) -> int:
        """The grounded check's index-time sentence vectors (``<index_dir>/sentences``; 0 without them)."""
        from ragcost.cost.storage import folder_bytes

        return folder_bytes(self.config.index_path / "sentences")

    def store_bytes(self) -> int:
        """The store's bytes for this pipeline's own tables (DuckDB file share, or PostgreSQL relation sizes);
        0 for a store that is not SQL (a plugin), which has no tables to measure here."""
        from ragcost.cost.storage import table_bytes
        from ragcost.store.sql import SQLStore

        store = self.store()
        if not isinstance(store, SQLStore):
            return 0
        return table_bytes(store.engine, [t.name for t in store.tables.md.sorted_tables])

    def storage_usd_per_query(self) -> float:
        from ragcost.cost.compute import storage_cost_per_query

        return storage_cost_per_query(*self.storage_bytes(), self.price_book)
