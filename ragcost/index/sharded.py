"""An HNSW index held as N graphs over contiguous label ranges: each searched with the same k and
parameters, their top k merged by score.

A sharded graph builds in parallel (under ``executor: ray`` one Ray task per shard) and each
shard is smaller than the whole, so shards can live on different machines; a query costs N graph
walks. ``sharded_class(backend)`` is the backend's sharded counterpart: a ``VectorIndex`` of the
same backend and kinds, so the retrieve stage, the artifact and the storage cost treat it like
any other index. Its file is one uncompressed zip: ``shards.json`` (count, label ranges) and each
shard as its backend saved it, so one shard can be read without the others.
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Optional

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.errors import ConfigError, FingerprintError
from ragcost.index.base import NO_ROWS, FilteredResult, VectorIndex, field_error, index_registry

_META = "shards.json"


def shard_count(config: IndexConfig) -> int:
    """The shards ``config`` asks for (1 when it does not say)."""
    return config.shards or 1


def can_shard(config: IndexConfig) -> bool:
    """Whether the backend declares ``config.kind`` shardable (hnswlib and faiss: hnsw)."""
    return config.kind in index_registry.get(config.backend).shardable


def check_shards(config: IndexConfig) -> None:
    """A ConfigError (``.field`` = ("shards",)) when ``shards`` > 1 asks for a kind that is not sharded."""
    if shard_count(config) > 1 and not can_shard(config):
        kinds = index_registry.get(config.backend).shardable
        fix = f"use kind: {kinds[0]}" if kinds else "use backend: hnswlib or faiss with kind: hnsw"
        raise field_error(f"shards: {config.shards}: backend {config.backend} kind {config.kind} is built as one "
                          f"index (under executor: ray IVF kinds are built in shards and merged into one); "
                          f"remove shards or {fix}", ("shards",))


def check_shards_fit(shards: int, vectors: int, prefix: str = "", why: str = "") -> None:
    """Every shard holds at least one vector: a ConfigError naming the fix otherwise."""
    if shards > vectors:
        raise ConfigError(f"{prefix}index shards: {shards}{why} is more than the {vectors} vectors to index (each "
                          f"shard needs one); set index shards: to at most {max(vectors, 1)}")


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """(start, stop) rows of ``shards`` contiguous, near-equal parts of ``n`` rows."""
    edges = np.linspace(0, n, shards + 1).astype(int)
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


def index_class(config: IndexConfig, shards: Optional[int] = None) -> type[VectorIndex]:
    """The class an index of ``config`` is: the registered backend's, or its sharded counterpart."""
    cls = index_registry.get(config.backend)
    return sharded_class(cls) if (shards or shard_count(config)) > 1 else cls


def new_index(config: IndexConfig, dim: int, precision: str = "float32", shards: Optional[int] = None) -> VectorIndex:
    """An empty index of ``config`` (``shards`` overrides ``config.shards``), ready to build or load."""
    n = shards or shard_count(config)
    if n > 1:
        check_shards(config.model_copy(update={"shards": n}))
        return sharded_class(index_registry.get(config.backend))(config, dim, precision, shards=n)
    return index_registry.get(config.backend)(config, dim=dim, precision=precision)


@lru_cache(maxsize=None)
def sharded_class(inner: type[VectorIndex]) -> type["ShardedIndex"]:
    """The sharded counterpart of backend class ``inner``: same backend name, devices and shardable kinds."""
    kinds = {k: spec for k, spec in inner.kinds.items() if k in inner.shardable}
    return type(f"Sharded{inner.__name__}", (ShardedIndex,),
                {"inner": inner, "backend": inner.backend, "kinds": kinds, "devices": inner.devices,
                 "__module__": __name__, "__doc__": f"{inner.__name__} graphs over label ranges, searched and merged."})


def merge_top_k(scores: list[np.ndarray], labels: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best k of several (q, k_i) results by score, ties by label; missing ones -1 / -inf, last."""
    s = np.concatenate(scores, axis=1)
    lb = np.concatenate(labels, axis=1)
    if s.shape[1] < k:
        pad = k - s.shape[1]
        s = np.pad(s, ((0, 0), (0, pad)), constant_values=-np.inf)
        lb = np.pad(lb, ((0, 0), (0, pad)), constant_values=-1)
    order = np.lexsort((lb, -s))[:, :k]  # last key first: score descending, then label
    return np.take_along_axis(s, order, axis=1).astype(np.float32, copy=False), np.take_along_axis(lb, order, axis=1)


class ShardedIndex(VectorIndex):
    """N indexes of one backend over disjoint, contiguous label ranges, searched as one."""

    inner: ClassVar[type[VectorIndex]]
    suffix = "shards"

    def __init__(self, config: IndexConfig, dim: int, precision: str = "float32", shards: Optional[int] = None) -> None:
        super().__init__(config, dim, precision)
        self.shard_count = shards or shard_count(config)
        self.shards: list[VectorIndex] = []
        self._lo = np.zeros(0, np.int64)  # each shard's smallest and largest label
        self._hi = np.zeros(0, np.int64)

    def new_shard(self) -> VectorIndex:
        return self.inner(self.config, dim=self.dim, precision=self.precision)

    def adopt(self, shards: list[VectorIndex], ranges: list[tuple[int, int]]) -> None:
        """Hold ``shards``, shard i covering labels ``ranges[i]`` (inclusive; disjoint, ascending)."""
        self.shards = list(shards)
        self.shard_count = len(shards)
        self._lo = np.array([r[0] for r in ranges], np.int64)
        self._hi = np.array([r[1] for r in ranges], np.int64)
        self.warnings = sorted({w for s in shards for w in s.warnings})

    # ---- build ---------------------------------------------------------------------------
    def build(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        """Build the shards one after another here (``executor: ray`` builds them on the cluster)."""
        vectors, labels = sorted_by_label(vectors, labels)
        check_shards_fit(self.shard_count, len(labels))
        parts = []
        for a, b in shard_bounds(len(labels), self.shard_count):
            shard = self.new_shard()
            shard.build(vectors[a:b], labels[a:b])
            parts.append(shard)
        self.adopt(parts, label_ranges(labels, self.shard_count))

    # ---- search --------------------------------------------------------------------------
    def search(
        self,
        queries: np.ndarray,
        k: int,
        params: dict[str, Any] | None = None,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every shard's top k (``allowed`` split by the shards' label ranges), merged."""
        return self._search(queries, k, params, allowed)[:2]

    def search_filtered(
        self, queries: np.ndarray, k: int, params: dict[str, Any] | None, allowed: np.ndarray
    ) -> FilteredResult:
        """Filtered top k; a row is exact when any shard scored it exactly (its own fallback)."""
        return self._search(queries, k, params, allowed)

    def _search(self, queries: np.ndarray, k: int, params: dict[str, Any] | None,
                allowed: np.ndarray | None) -> FilteredResult:
        queries = np.atleast_2d(np.ascontiguousarray(queries, dtype=np.float32))
        scores, labels, exact = [], [], [NO_ROWS]
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=np.int64)
            if len(allowed) > 1 and not (allowed[1:] >= allowed[:-1]).all():
                allowed = np.sort(allowed)
            starts = np.searchsorted(allowed, self._lo, side="left")
            stops = np.searchsorted(allowed, self._hi, side="right")
        for i, shard in enumerate(self.shards):
            if allowed is None:
                s, lb = shard.search(queries, k, params=params)
            else:
                mine = allowed[starts[i]:stops[i]]
                if len(mine) == 0:
                    continue  # nothing this shard holds is allowed: no walk
                s, lb, rows = shard.search_filtered(queries, k, params, mine)
                exact.append(rows)
            scores.append(s)
            labels.append(lb)
        if not scores:
            if params:
                self.search_params(params)  # a bad override is refused even when no shard was searched
            empty = np.zeros((len(queries), 0))
            return FilteredResult(*merge_top_k([empty.astype(np.float32)], [empty.astype(np.int64)], k), NO_ROWS)
        return FilteredResult(*merge_top_k(scores, labels, k), np.unique(np.concatenate(exact)).astype(np.int64))

    def search_one(self, query: np.ndarray, k: int) -> tuple[list[int], list[float]]:
        """One query through each shard's own single-query path, merged as ``search`` merges."""
        vec = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        all_l: list[int] = []
        all_s: list[float] = []
        for shard in self.shards:
            lbs, scs = shard.search_one(vec, k)
            all_l += lbs
            all_s += scs
        lb = np.array(all_l, np.int64)
        # Ordered by the float32 score, as ``search`` orders, so both give the same labels.
        order = np.lexsort((lb, -np.array(all_s, np.float32)))[:k].tolist()
        out_l = [all_l[i] for i in order]
        out_s = [all_s[i] for i in order]
        missing = k - len(out_l)
        return out_l + [-1] * missing, out_s + [-np.inf] * missing

    # ---- persistence and size ------------------------------------------------------------
    def save(self, path: Path) -> None:
        """One uncompressed zip: ``shards.json`` and each shard's own file."""
        meta = {"format": 1, "backend": self.backend, "kind": self.config.kind, "shards": len(self.shards),
                "ranges": [[int(a), int(b)] for a, b in zip(self._lo, self._hi)],
                "counts": [len(s) for s in self.shards]}
        with tempfile.TemporaryDirectory(prefix="ragcost-shards-") as tmp, \
                zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
            z.writestr(_META, json.dumps(meta))
            for i, shard in enumerate(self.shards):
                part = Path(tmp) / self._member(i)
                shard.save(part)
                z.write(part, arcname=self._member(i))
                part.unlink()

    def load(self, path: Path) -> None:
        """Read a file written by ``save``; the shard count is the file's."""
        try:
            with tempfile.TemporaryDirectory(prefix="ragcost-shards-") as tmp, zipfile.ZipFile(path) as z:
                meta = json.loads(z.read(_META))
                if (meta.get("backend"), meta.get("kind")) != (self.backend, self.config.kind):
                    raise FingerprintError(f"{path}: holds {meta.get('backend')}/{meta.get('kind')} shards, "
                                           f"not {self.backend}/{self.config.kind}")
                shards = []
                for i in range(int(meta["shards"])):
                    part = Path(z.extract(self._member(i), tmp))
                    shard = self.new_shard()
                    shard.load(part)
                    part.unlink()
                    shards.append(shard)
        except (zipfile.BadZipFile, KeyError, ValueError) as e:
            raise FingerprintError(f"{path}: not a sharded index file ({type(e).__name__}: {e})") from None
        self.adopt(shards, [tuple(r) for r in meta["ranges"]])

    def _member(self, i: int) -> str:
        return f"shard-{i}.{self.inner.suffix}"

    def nbytes(self) -> int:
        """The shards' bytes, summed: what N machines hold between them."""
        return sum(int(s.nbytes()) for s in self.shards)

    def __len__(self) -> int:
        return sum(len(s) for s in self.shards)


def sorted_by_label(vectors: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectors and labels ordered by label (already-sorted input is returned as is)."""
    labels = np.asarray(labels, dtype=np.int64)
    if len(labels) > 1 and not (labels[1:] > labels[:-1]).all():
        order = np.argsort(labels, kind="stable")
        return np.ascontiguousarray(np.asarray(vectors, dtype=np.float32)[order]), labels[order]
    return np.ascontiguousarray(vectors, dtype=np.float32), labels


def label_ranges(sorted_labels: np.ndarray, shards: int) -> list[tuple[int, int]]:
    """(smallest, largest) label of each of ``shard_bounds``'s parts of label-sorted ``sorted_labels``."""
    return [(int(sorted_labels[a]), int(sorted_labels[b - 1])) for a, b in shard_bounds(len(sorted_labels), shards)]


def shard_bytes(config: IndexConfig, dim: int, precision: str, vectors: np.ndarray, labels: np.ndarray) -> bytes:
    """One shard built from its vectors, as the bytes of its backend's saved file (what a Ray task returns)."""
    shard = index_registry.get(config.backend)(config, dim=dim, precision=precision)
    shard.build(vectors, labels)
    with tempfile.TemporaryDirectory(prefix="ragcost-shard-") as tmp:
        path = Path(tmp) / f"shard.{shard.suffix}"
        shard.save(path)
        return path.read_bytes()


def shard_from_bytes(index: ShardedIndex, blob: bytes) -> VectorIndex:
    """A shard of ``index``'s backend read back from ``shard_bytes``."""
    shard = index.new_shard()
    with tempfile.TemporaryDirectory(prefix="ragcost-shard-") as tmp:
        path = Path(tmp) / f"shard.{shard.suffix}"
        path.write_bytes(blob)
        shard.load(path)
    return shard
