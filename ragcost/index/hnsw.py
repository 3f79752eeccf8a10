"""hnswlib HNSW index over inner product (cosine on normalised vectors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.errors import RagcostError
from ragcost.index import sizes
from ragcost.index.base import NO_ROWS, FilteredResult, KindSpec, VectorIndex, index_registry
from ragcost.index.exact import exact_search
from ragcost.index.params import HNSWBuild, HNSWSearch


# hnswlib's saveIndex header: six size_t, maxlevel and the entry point (4 bytes each), five size_t and mult.
_HNSWLIB_HEADER = 6 * 8 + 4 + 4 + 5 * 8


def _pad(scores: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Widen (q, k') results to (q, k) with -inf / -1."""
    out_s = np.full((len(scores), k), -np.inf, dtype=np.float32)
    out_l = np.full((len(scores), k), -1, dtype=np.int64)
    out_s[:, : scores.shape[1]] = scores
    out_l[:, : labels.shape[1]] = labels
    return out_s, out_l


@index_registry.register("hnswlib")
class HnswlibIndex(VectorIndex):
    """HNSW graph from hnswlib; stores float32 vectors only."""

    backend = "hnswlib"
    kinds = {"hnsw": KindSpec(HNSWBuild, HNSWSearch, ("float32",),
                              "hnswlib stores float32 only; use backend: faiss for float16/int8/binary",
                              holds_float32=True, size=sizes.hnswlib_size,
                              size_source="bench.plan_ram")}  # its level 0 keeps the vectors
    suffix = "hnsw"
    shardable = ("hnsw",)

    def __init__(self, config: IndexConfig, dim: int, precision: str = "float32") -> None:
        super().__init__(config, dim, precision)
        self._index: Any = None
        self._ef_cache: tuple[Any, int] | None = None  # (config.search items, ef): skips re-validating per query
        self._top: int | None = None  # the largest label in the index, for the filter's lookup table

    def _new(self) -> Any:
        try:
            import hnswlib
        except ImportError as e:  # pragma: no cover - hnswlib is a core dependency
            raise RagcostError("backend hnswlib needs the hnswlib package: pip install hnswlib") from e
        return hnswlib.Index(space="ip", dim=self.dim)

    def _threads(self) -> int:
        return self.config.threads or -1  # hnswlib: -1 = all cores

    def build(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        """Build the graph from (n, dim) float32 vectors and their int64 labels."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        p = self.build_params()
        self._index = self._new()
        self._index.init_index(
            max_elements=max(len(vectors), 1), M=p.M, ef_construction=p.ef_construction, random_seed=100
        )
        if len(vectors):
            self._index.add_items(vectors, np.asarray(labels, dtype=np.int64), num_threads=self._threads())
        self._top = None

    def search(
        self,
        queries: np.ndarray,
        k: int,
        params: dict[str, Any] | None = None,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by inner product; ``allowed`` uses hnswlib's ``filter`` during the graph walk."""
        return self._search(queries, k, params, allowed)[:2]

    def search_filtered(
        self, queries: np.ndarray, k: int, params: dict[str, Any] | None, allowed: np.ndarray
    ) -> FilteredResult:
        """Filtered top-k; every row is scored exactly when hnswlib's walk found fewer than k."""
        return self._search(queries, k, params, allowed)

    def _search(
        self, queries: np.ndarray, k: int, params: dict[str, Any] | None, allowed: np.ndarray | None
    ) -> FilteredResult:
        queries = np.atleast_2d(np.ascontiguousarray(queries, dtype=np.float32))
        count = len(self)
        k_eff = min(k, count)
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=np.int64)
            k_eff = min(k_eff, len(allowed))
        if k_eff <= 0 or len(queries) == 0:
            return FilteredResult(*_pad(np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64), k),
                                  NO_ROWS)
        ef = max(self._ef(params), k_eff)
        if ef != self._index.ef:
            self._index.set_ef(ef)
        try:
            if allowed is None:
                lab, dist = self._index.knn_query(queries, k=k_eff, num_threads=self._threads())
            else:
                # hnswlib calls a Python filter under the GIL; its docs require num_threads=1 then.
                lab, dist = self._index.knn_query(queries, k=k_eff, num_threads=1, filter=self._member(allowed))
        except RuntimeError:
            # hnswlib raises when the walk finds fewer than k (tiny filters, disconnected
            # regions). Score the allowed vectors exactly instead: still no post-filtering.
            return FilteredResult(*self._exact(queries, k, allowed), np.arange(len(queries), dtype=np.int64))
        scores = np.subtract(1.0, dist, dtype=np.float32)  # hnswlib "ip" distance is 1 - <q, x>
        lab = lab.astype(np.int64, copy=False)
        if k_eff == k:
            return FilteredResult(scores, lab, NO_ROWS)
        return FilteredResult(*_pad(scores, lab, k), NO_ROWS)

    def search_one(self, query: np.ndarray, k: int) -> tuple[list[int], list[float]]:
        """One query, no filter: hnswlib's ``knn_query`` and Python lists, without the batch bookkeeping."""
        count = self._index.get_current_count() if self._index is not None else 0
        if k <= 0 or k > count:
            return super().search_one(query, k)
        ef = max(self._ef(None), k)
        if ef != self._index.ef:
            self._index.set_ef(ef)
        lab, dist = self._index.knn_query(query, k=k, num_threads=self._threads())
        # "ip" distance is 1 - <q, x>. In Python: a numpy ufunc call costs ~10 us here, cold, after the
        # walk has evicted the caches (bench.overhead). Scores are doubles, within 1 float32 ulp of search's.
        return lab[0].tolist(), [1.0 - d for d in dist[0].tolist()]

    def _member(self, allowed: np.ndarray) -> Any:
        """The cheapest callable hnswlib can ask "is this label allowed?" per visited node.

        Store labels are small ints, so a bytes table indexed by label (``bytes.__getitem__``, a C
        call) when it stays small; else a set. Building a 100k-entry set per call cost ~8 ms,
        more than the filtered walk itself (``bench.filters``).
        """
        top = self._top_label()
        if len(allowed) and int(allowed[0]) >= 0 and top < max(64 * len(allowed), 1 << 24):
            mask = np.zeros(top + 1, dtype=np.uint8)
            mask[allowed[allowed <= top]] = 1
            return mask.tobytes().__getitem__
        return set(allowed.tolist()).__contains__

    def _top_label(self) -> int:
        if self._top is None:
            ids = self._index.get_ids_list()
            self._top = int(max(ids)) if ids else -1
        return self._top

    def _ef(self, params: dict[str, Any] | None) -> int:
        if params:
            return self.search_params(params).ef
        search = self.config.search
        cached = self._ef_cache
        if cached is None or cached[0] != search:  # a dict compare: cheap, and sees in-place edits
            cached = self._ef_cache = (dict(search), self.search_params(None).ef)
        return cached[1]

    def _exact(self, queries: np.ndarray, k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(self._index.get_ids_list(), dtype=np.int64)
        if allowed is not None:
            ids = ids[np.isin(ids, allowed)]
        vecs = np.asarray(self._index.get_items(ids, return_type="numpy"), dtype=np.float32).reshape(len(ids), self.dim)
        return exact_search(vecs, ids, queries, k)

    def save(self, path: Path) -> None:
        """Write the graph and vectors to one file."""
        self._index.save_index(str(path))

    def load(self, path: Path) -> None:
        """Read a file written by ``save``."""
        self._index = self._new()
        self._index.load_index(str(path))
        self._top = None

    def nbytes(self) -> int:
        """hnswlib's allocation as loaded (:func:`ragcost.index.sizes.hnswlib_bytes`, the formula
        ``plan`` uses too): its max_elements slots, and the upper levels' link lists measured from
        the serialised size (the file holds level 0, then each element's 4-byte length and links)."""
        n = len(self)
        if n == 0:
            return 0
        m = int(self._index.M)
        level0 = self.dim * 4 + 8 + 4 + 2 * m * 4
        upper = int(self._index.index_file_size()) - _HNSWLIB_HEADER - n * (level0 + 4)
        return sizes.hnswlib_bytes(n, self.dim, m, max_elements=int(self._index.max_elements),
                             upper_link_bytes=max(upper, 0))

    def __len__(self) -> int:
        return 0 if self._index is None else int(self._index.get_current_count())
