"""faiss indexes: flat, HNSW, IVF-Flat and IVF-PQ over inner product, at float32/float16/int8/binary."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.errors import ConfigError, DependencyError, RagcostError
from ragcost.index import sizes
from ragcost.index.base import NO_ROWS, PRECISIONS, FilteredResult, KindSpec, VectorIndex, index_registry
from ragcost.index.params import HNSWBuild, HNSWSearch, IVFBuild, IVFPQBuild, IVFSearch, NoParams

# Scalar-quantizer code per precision, as faiss.index_factory spells it.
_CODE = {"float32": "Flat", "float16": "SQfp16", "int8": "SQ8"}
_NO_BINARY_IVF = ("faiss binary indexes here are flat or hnsw (IndexBinaryIVF has no filtered search); "
                  "use kind: flat or kind: hnsw")
GPU_HINT = "device: gpu needs faiss-gpu and a CUDA GPU: pip install 'ragcost[gpu]' (faiss-gpu), or set device: cpu"


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as e:  # pragma: no cover - faiss-cpu is a core dependency
        raise DependencyError("backend faiss needs faiss: pip install faiss-cpu (or 'ragcost[gpu]')") from e
    return faiss


POINTS_PER_CENTROID = 256  # faiss's own cap when it trains k-means (and PQ codebooks) on more points


def training_sample(vectors: np.ndarray, trained: Any, seed: int = 0) -> np.ndarray:
    """A seeded sample as large as faiss would train on: 256 points per centroid (and per PQ code)."""
    want = POINTS_PER_CENTROID * int(getattr(trained, "nlist", 1))
    pq = getattr(trained, "pq", None)
    if pq is not None:
        want = max(want, POINTS_PER_CENTROID * (1 << int(pq.nbits)))
    vectors = np.ascontiguousarray(vectors, np.float32)
    if len(vectors) <= want:
        return vectors
    rows = np.sort(np.random.default_rng(seed).choice(len(vectors), size=want, replace=False))
    return np.ascontiguousarray(vectors[rows])


def auto_nlist(n: int) -> int:
    """About 4*sqrt(n) coarse clusters, keeping at least 39 training points per cluster."""
    return int(min(max(int(4 * math.sqrt(n)), 1), max(n // 39, 1)))


def _selector(faiss: Any, allowed: np.ndarray) -> tuple[Any, Any]:
    """An IDSelector for int64 labels: a bitmap when labels are small enough, else a hash set.

    A bitmap costs max_label/8 bytes and one bit test per candidate; IDSelectorBatch hashes every
    allowed label on each call, which dominates a filtered search when many labels match.
    """
    top = int(allowed.max()) if len(allowed) else 0
    if len(allowed) and int(allowed.min()) >= 0 and top // 8 < max(64 * len(allowed), 1 << 20):
        mask = np.zeros(top + 1, dtype=bool)
        mask[allowed] = True
        bitmap = np.packbits(mask, bitorder="little")
        return faiss.IDSelectorBitmap(bitmap), bitmap
    return faiss.IDSelectorBatch(allowed), allowed


@index_registry.register("faiss")
class FaissIndex(VectorIndex):
    """One faiss index whose labels are the store's int64 labels."""

    backend = "faiss"
    kinds = {
        # Flat storage (flat, hnsw, ivf_flat at float32) keeps every vector as its codes.
        "flat": KindSpec(NoParams, NoParams, PRECISIONS, holds_float32=True, size=sizes.flat_size),
        "hnsw": KindSpec(HNSWBuild, HNSWSearch, PRECISIONS, holds_float32=True, size=sizes.faiss_hnsw_size,
                         size_source="faiss's serialised size (ragcost.index.sizes)"),
        "ivf_flat": KindSpec(IVFBuild, IVFSearch, ("float32", "float16", "int8"), _NO_BINARY_IVF, holds_float32=True,
                             size=sizes.ivf_flat_size),
        "ivf_pq": KindSpec(IVFPQBuild, IVFSearch, ("float32",), (
            "PQ is its own compression and takes float32 vectors; use precision: float32 "
            "(tune build.m/nbits) or kind: ivf_flat for float16/int8"), size=sizes.ivf_pq_size,
            size_source="bench.plan_ram"),
    }
    devices = ("cpu", "gpu")
    suffix = "faiss"
    shardable = ("hnsw",)
    trained_shards = ("ivf_flat", "ivf_pq")  # trained once, shards added on workers, their lists merged into one

    def __init__(self, config: IndexConfig, dim: int, precision: str = "float32") -> None:
        super().__init__(config, dim, precision)
        self._check_dim()
        self._index: Any = None
        self._gpu_res: Any = None
        self._nbytes: int | None = None
        self._sp_cache: tuple[Any, Any] | None = None  # (config.search items, params): skips re-validating per query
        self._fp_cache: tuple[Any, Any] | None = None  # (key, faiss SearchParameters) for searches without a selector
        self._fast_one: Any = None  # (faiss, swig_ptr) when search_one may call search_c directly; False when not
        if config.device == "gpu":
            self._check_gpu()

    @property
    def binary(self) -> bool:
        return self.precision == "binary"

    def _check_dim(self) -> None:
        """The combinations the kinds table cannot say: those that depend on the dimension."""
        kind, prec, dim = self.config.kind, self.precision, self.dim
        if prec == "binary" and dim % 8:
            raise ConfigError(f"index: precision binary packs 8 dims per byte; dim {dim} is not a multiple of 8")
        if kind == "ivf_pq":
            m = self.build_params().m
            if dim % m:
                divisors = [d for d in range(1, dim + 1) if dim % d == 0]
                raise ConfigError(
                    f"index build.m: {m} does not divide dim {dim}; use one of {divisors}"
                )

    def _check_gpu(self) -> None:
        faiss = _faiss()
        if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
            raise DependencyError(GPU_HINT)
        if self.config.kind == "hnsw":
            raise ConfigError("index: faiss has no HNSW on GPU; use kind: flat/ivf_flat/ivf_pq or device: cpu")
        if self.binary:
            raise ConfigError("index: precision binary runs on CPU only here; use device: cpu")

    def _set_threads(self, faiss: Any) -> None:
        if self.config.threads > 0:
            faiss.omp_set_num_threads(self.config.threads)

    # ---- build ------------------------------------------------------------------

    def build(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        """Train (when the kind needs it) and add (n, dim) float32 vectors under their int64 labels."""
        faiss = _faiss()
        self._set_threads(faiss)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        labels = np.ascontiguousarray(labels, dtype=np.int64)
        self.warnings = []
        index = self._new_binary(faiss) if self.binary else self._new_float(faiss, len(vectors))
        data = np.packbits(vectors > 0, axis=1) if self.binary else vectors
        if not index.is_trained:
            if len(data) == 0:
                raise RagcostError(f"index: kind {self.config.kind} needs training vectors; got 0")
            index.train(data)
        if len(data):
            index.add_with_ids(data, labels)
        self._index = self._to_device(faiss, index)
        self._nbytes = None
        self._fast_one = None

    def _new_binary(self, faiss: Any) -> Any:
        if self.config.kind == "hnsw":
            p = self.build_params()
            inner = faiss.IndexBinaryHNSW(self.dim, p.M)
            inner.hnsw.efConstruction = p.ef_construction
        else:
            inner = faiss.IndexBinaryFlat(self.dim)
        return faiss.IndexBinaryIDMap2(inner)

    def _new_float(self, faiss: Any, n: int) -> Any:
        kind, code, ip = self.config.kind, _CODE.get(self.precision), faiss.METRIC_INNER_PRODUCT
        p = self.build_params()
        if kind == "flat":
            return faiss.index_factory(self.dim, f"IDMap2,{code}", ip)
        if kind == "hnsw":
            index = faiss.index_factory(self.dim, f"IDMap2,HNSW{p.M},{code}", ip)
            faiss.downcast_index(index.index).hnsw.efConstruction = p.ef_construction
            return index
        nlist = self._nlist(p.nlist, n)
        if kind == "ivf_flat":
            # IVF stores ids itself, so no IDMap wrapper: add_with_ids keeps the store's labels.
            return faiss.index_factory(self.dim, f"IVF{nlist},{code}", ip)
        # "np": no polysemous training -- it only serves Hamming pre-filtering, which we never use, and
        # costs ~10x the PQ training time.
        return faiss.index_factory(self.dim, f"IVF{nlist},PQ{p.m}x{self._pq_nbits(p.nbits, n)}np", ip)

    def _nlist(self, nlist: int | str, n: int) -> int:
        if nlist == "auto":
            return auto_nlist(n)
        if n and nlist * 39 > n:
            fitted = auto_nlist(n)
            self.warnings.append(
                f"IVF nlist={nlist} wants >= {nlist * 39} training points, got {n}; using nlist={fitted}"
            )
            return fitted
        return int(nlist)

    def _pq_nbits(self, nbits: int, n: int) -> int:
        if n and n < 2**nbits:
            reduced = max(int(math.floor(math.log2(n))), 1)
            self.warnings.append(
                f"IVF-PQ nbits={nbits} needs >= {2**nbits} training points, got {n}; using nbits={reduced}"
            )
            return reduced
        if n < 39 * 2**nbits:
            self.warnings.append(
                f"IVF-PQ nbits={nbits} wants >= {39 * 2**nbits} training points, got {n}; codes will be coarse"
            )
        return nbits

    def _to_device(self, faiss: Any, index: Any) -> Any:
        if self.config.device != "gpu":
            return index
        self._gpu_res = faiss.StandardGpuResources()
        return faiss.index_cpu_to_gpu(self._gpu_res, 0, index)

    def _cpu_index(self) -> Any:
        if self.config.device == "gpu":
            return _faiss().index_gpu_to_cpu(self._index)
        return self._index

    # ---- search -----------------------------------------------------------------

    def search(
        self,
        queries: np.ndarray,
        k: int,
        params: dict[str, Any] | None = None,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by inner product (binary: score = -Hamming distance); ``allowed`` is an IDSelector."""
        return self._search(queries, k, params, allowed)[:2]

    def search_filtered(
        self, queries: np.ndarray, k: int, params: dict[str, Any] | None, allowed: np.ndarray
    ) -> FilteredResult:
        """Filtered top-k; HNSW rows whose walk found fewer than k are rescored exactly and listed."""
        return self._search(queries, k, params, allowed)

    def _search(
        self, queries: np.ndarray, k: int, params: dict[str, Any] | None, allowed: np.ndarray | None
    ) -> FilteredResult:
        faiss = _faiss()
        self._set_threads(faiss)
        sp = self._search_params(params)
        queries = np.atleast_2d(np.ascontiguousarray(queries, dtype=np.float32))
        if self._index is None or self._index.ntotal == 0 or k <= 0:
            return FilteredResult(np.full((len(queries), max(k, 0)), -np.inf, np.float32),
                                  np.full((len(queries), max(k, 0)), -1, np.int64), NO_ROWS)
        sel, _keep = None, None
        if allowed is not None:
            allowed = np.ascontiguousarray(allowed, dtype=np.int64)
            sel, _keep = _selector(faiss, allowed)  # _keep: the bitmap faiss points into, alive until search returns
        fparams = self._faiss_params(faiss, sp, k, sel)
        if self.binary:
            dist, lab = self._index.search(np.packbits(queries > 0, axis=1), k, params=fparams)
            scores = -dist.astype(np.float32)
        else:
            scores, lab = self._index.search(queries, k, params=fparams)
        lab = lab.astype(np.int64, copy=False)
        missing = lab < 0
        if missing.any():
            scores = np.where(missing, -np.inf, scores).astype(np.float32)
        else:
            scores = scores.astype(np.float32, copy=False)
        exact_rows = NO_ROWS
        if allowed is not None and self.config.kind == "hnsw":
            exact_rows = self._refill_short_rows(faiss, queries, k, allowed, scores, lab)
        return FilteredResult(scores, lab, exact_rows)

    def search_one(self, query: np.ndarray, k: int) -> tuple[list[int], list[float]]:
        """One query, no filter: faiss's own ``search_c`` on our output buffers, with the cached
        SearchParameters -- the work faiss's Python ``search`` does, done once."""
        fast = self._fast_one
        if fast is None:
            fast = self._fast_one = self._make_fast_one()
        if (fast is False or k <= 0 or not isinstance(query, np.ndarray) or query.dtype != np.float32
                or query.shape != (self.dim,) or not query.flags.c_contiguous):
            return super().search_one(query, k)
        faiss, ptr = fast
        self._set_threads(faiss)
        fparams = self._faiss_params(faiss, self._search_params(None), k, None)
        dist = np.empty(k, dtype=np.float32)
        lab = np.empty(k, dtype=np.int64)
        self._index.search_c(1, ptr(query), k, ptr(dist), ptr(lab), fparams)
        labels, scores = lab.tolist(), dist.tolist()
        if labels[-1] < 0:  # faiss puts missing results last
            scores = [s if lb >= 0 else -math.inf for lb, s in zip(labels, scores)]
        return labels, scores

    def _make_fast_one(self) -> Any:
        if self.binary or self.config.device == "gpu" or self._index is None or not hasattr(self._index, "search_c"):
            return False
        faiss = _faiss()
        return faiss, faiss.swig_ptr

    def _refill_short_rows(
        self, faiss: Any, queries: np.ndarray, k: int, allowed: np.ndarray, scores: np.ndarray, lab: np.ndarray
    ) -> np.ndarray:
        """Rescore rows where the filtered graph walk found fewer than k: exact over the allowed stored
        codes, in place. Returns the rows it rescored."""
        found = (lab >= 0).sum(axis=1)
        if (found >= min(k, len(allowed))).all():
            return NO_ROWS  # every row is full: skip the (n log n) check of which allowed labels the index holds
        present = allowed[np.isin(allowed, faiss.vector_to_array(self._index.id_map))]
        want = min(k, len(present))
        short = np.flatnonzero(found < want)
        if len(short) == 0:
            return NO_ROWS
        # A very selective filter starves HNSW's bounded candidate list (faiss gives no more than
        # it met); scoring the few allowed codes the index stores is exact and still not post-filtering.
        if self.binary:
            codes = np.stack([self._index.reconstruct(int(i)) for i in present])
            flat = faiss.IndexBinaryFlat(self.dim)
            flat.add(codes)
            dist, pos = flat.search(np.packbits(queries[short] > 0, axis=1), k)
            sub_scores = -dist.astype(np.float32)
        else:
            flat = faiss.IndexFlatIP(self.dim)
            flat.add(self._index.reconstruct_batch(present))
            sub_scores, pos = flat.search(queries[short], k)
        sub_lab = np.where(pos >= 0, present[np.maximum(pos, 0)], -1)
        lab[short] = sub_lab
        scores[short] = np.where(sub_lab < 0, -np.inf, sub_scores)
        return short.astype(np.int64, copy=False)

    def _search_params(self, params: dict[str, Any] | None) -> Any:
        if params:
            return self.search_params(params)
        search = self.config.search
        cached = self._sp_cache
        if cached is None or cached[0] != search:  # a dict compare: cheap, and sees in-place edits
            cached = self._sp_cache = (dict(search), self.search_params(None))
        return cached[1]

    def _faiss_params(self, faiss: Any, sp: Any, k: int, sel: Any) -> Any:
        if sel is not None:
            return self._new_faiss_params(faiss, sp, k, sel)
        # Without a selector the object depends only on (ef or nprobe, k): keep the last one, since
        # building a SWIG SearchParameters costs more than a small IVF search's own Python work.
        key = (sp, k)
        cached = self._fp_cache
        if cached is None or cached[0] != key:
            cached = self._fp_cache = (key, self._new_faiss_params(faiss, sp, k, None))
        return cached[1]

    def _new_faiss_params(self, faiss: Any, sp: Any, k: int, sel: Any) -> Any:
        kind = self.config.kind
        extra = {} if sel is None else {"sel": sel}
        if kind == "hnsw":
            return faiss.SearchParametersHNSW(efSearch=max(sp.ef, k), **extra)
        if kind in ("ivf_flat", "ivf_pq"):
            return faiss.SearchParametersIVF(nprobe=sp.nprobe, **extra)
        return faiss.SearchParameters(**extra) if sel is not None else None

    # ---- built in shards on a cluster (executor: ray) ------------------------------

    def builds_in_shards(self) -> bool:
        return super().builds_in_shards() and self.config.device == "cpu" and not self.binary

    def trained_for_shards(self, vectors: np.ndarray) -> tuple[bytes, int]:
        """The empty IVF index (nlist auto, PQ bits fitted to ``len(vectors)``) trained on a seeded sample as
        large as faiss itself would train on, serialised; and the sample's size."""
        faiss = _faiss()
        self._set_threads(faiss)
        self.warnings = []
        trained = self._new_float(faiss, len(vectors))
        sample = training_sample(vectors, trained)
        trained.train(sample)
        return bytes(faiss.serialize_index(trained)), len(sample)

    @staticmethod
    def add_shard(trained: bytes, vectors: np.ndarray, labels: np.ndarray) -> bytes:
        faiss = _faiss()
        index = faiss.deserialize_index(np.frombuffer(trained, dtype=np.uint8))
        index.add_with_ids(np.ascontiguousarray(vectors, np.float32), np.ascontiguousarray(labels, np.int64))
        return bytes(faiss.serialize_index(index))

    def adopt_shards(self, trained: bytes, parts: list[bytes]) -> int:
        """The shards' inverted lists merged into the trained index (labels kept), loaded through :meth:`load`."""
        import tempfile

        faiss = _faiss()
        merged = faiss.deserialize_index(np.frombuffer(trained, dtype=np.uint8))
        for got in parts:
            merged.merge_from(faiss.deserialize_index(np.frombuffer(got, dtype=np.uint8)), 0)  # 0: keep the labels
        with tempfile.TemporaryDirectory() as tmp:  # through load: device, caches, sizes
            path = Path(tmp) / "merged.faiss"
            faiss.write_index(merged, str(path))
            self.load(path)
        return int(merged.ntotal)

    # ---- persistence and size ---------------------------------------------------

    def save(self, path: Path) -> None:
        """Write the (CPU copy of the) index with faiss.write_index."""
        faiss = _faiss()
        write = faiss.write_index_binary if self.binary else faiss.write_index
        write(self._cpu_index(), str(path))

    def load(self, path: Path) -> None:
        """Read an index written by ``save`` (moved to the GPU when device: gpu)."""
        faiss = _faiss()
        read = faiss.read_index_binary if self.binary else faiss.read_index
        self._index = self._to_device(faiss, read(str(path)))
        self._nbytes = None
        self._fast_one = None

    def nbytes(self) -> int:
        """Size of the serialised index: codes, ids, centroids/codebooks and graph links."""
        if self._index is None:
            return 0
        if self._nbytes is None:
            faiss = _faiss()
            ser = faiss.serialize_index_binary if self.binary else faiss.serialize_index
            # The serialised form is the index's own accounting of what it holds; cached since it copies.
            self._nbytes = int(len(ser(self._cpu_index())))
        return self._nbytes

    def __len__(self) -> int:
        return 0 if self._index is None else int(self._index.ntotal)
