"""``executor: ray`` builds faiss IVF-Flat and IVF-PQ indexes in shards, merged with faiss's own merge,
and HNSW graphs in shards, kept as shards (``ragcost.index.sharded``).

The driver trains the empty index once on a seeded sample (k-means and PQ codebooks: what faiss
itself would subsample to), ships the trained index to ``workers`` Ray tasks, each adds one shard
of the stored vectors under their labels, and the driver merges the shards' inverted lists into
the trained index with ``merge_from`` (labels kept). The result is the same structure a local
build makes, loaded through the backend's own ``load``, and written as the same artifact.

An HNSW kind has no merge: each of the ``shards`` Ray tasks builds the backend's own graph over one
contiguous label range of the stored vectors and returns its saved file's bytes; the driver keeps
the graphs as one ``ShardedIndex`` whose searches walk them all and merge the top k.
Flat, binary IVF and GPU builds stay local.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.config.pipeline import RayOptions

SHARDED_KINDS = ("ivf_flat", "ivf_pq")
POINTS_PER_CENTROID = 256  # faiss's own cap when it trains k-means (and PQ codebooks) on more points


def ivf_in_shards(index: Any) -> bool:
    """Whether ``index`` (a VectorIndex) is a faiss IVF kind on the CPU that this module builds in shards."""
    cfg = index.config
    return (cfg.backend == "faiss" and cfg.kind in SHARDED_KINDS and cfg.device == "cpu"
            and not getattr(index, "binary", False))


def training_sample(vectors: np.ndarray, trained: Any, seed: int = 0) -> np.ndarray:
    """A seeded sample as large as faiss would train on: 256 points per centroid (and per PQ code)."""
    want = POINTS_PER_CENTROID * int(getattr(trained, "nlist", 1))
    pq = getattr(trained, "pq", None)
    if pq is not None:
        want = max(want, POINTS_PER_CENTROID * (1 << int(pq.nbits)))
    if len(vectors) <= want:
        return vectors
    rows = np.sort(np.random.default_rng(seed).choice(len(vectors), size=want, replace=False))
    return np.ascontiguousarray(vectors[rows])


def add_shard(trained: np.ndarray, vectors: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Run on a worker: the serialised trained index with this shard's vectors added, serialised."""
    import faiss

    index = faiss.deserialize_index(trained)
    index.add_with_ids(np.ascontiguousarray(vectors, np.float32), np.ascontiguousarray(labels, np.int64))
    return faiss.serialize_index(index)


def build_sharded(index: Any, vectors: np.ndarray, labels: np.ndarray, opts: RayOptions,
                  shards: int | None = None) -> dict[str, Any]:
    """Build ``index`` (a FaissIndex of an IVF kind) on the cluster; returns what the build did, per shard."""
    import faiss

    from ragcost.runtime.ray_executor import connect

    vectors = np.ascontiguousarray(vectors, np.float32)
    labels = np.ascontiguousarray(labels, np.int64)
    index.warnings = []
    trained = index._new_float(faiss, len(vectors))  # the backend's own structure (nlist auto, PQ bits fitted)
    sample = training_sample(vectors, trained)
    trained.train(sample)
    blob = faiss.serialize_index(trained)
    n = shards or opts.workers
    bounds = np.linspace(0, len(vectors), n + 1).astype(int)
    ray, owns = connect(opts)
    try:
        task = ray.remote(num_cpus=opts.cpus_per_worker)(add_shard)
        ref = ray.put(blob)
        parts = [task.remote(ref, vectors[a:b], labels[a:b]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        merged = faiss.deserialize_index(blob)
        for got in ray.get(parts):
            merged.merge_from(faiss.deserialize_index(got), 0)  # 0: keep the store's labels
    finally:
        if owns:
            ray.shutdown()
    with tempfile.TemporaryDirectory() as tmp:  # through the backend's own load: device, caches, sizes
        path = Path(tmp) / "merged.faiss"
        faiss.write_index(merged, str(path))
        index.load(path)
    return {"shards": len(parts), "trained_on": int(len(sample)), "vectors": int(merged.ntotal)}


def build_graph(config: IndexConfig, dim: int, precision: str, vectors: np.ndarray, labels: np.ndarray) -> bytes:
    """Run on a worker: one shard's graph, as the bytes of its backend's saved file."""
    from ragcost.index.sharded import shard_bytes

    return shard_bytes(config, dim, precision, vectors, labels)


def build_graph_shards(index: Any, vectors: np.ndarray, labels: np.ndarray, opts: RayOptions) -> dict[str, Any]:
    """Build ``index`` (a ShardedIndex) with one Ray task per shard; returns what the build did."""
    from ragcost.index.sharded import check_shards_fit, label_ranges, shard_bounds, shard_from_bytes, sorted_by_label
    from ragcost.runtime.ray_executor import connect

    vectors, labels = sorted_by_label(vectors, labels)
    n = index.shard_count
    check_shards_fit(n, len(labels))
    # A task builds with the CPUs it reserved, not every core of its node (threads: 0 means all).
    config = index.config if index.config.threads else index.config.model_copy(
        update={"threads": max(1, int(opts.cpus_per_worker))})
    ray, owns = connect(opts)
    try:
        task = ray.remote(num_cpus=opts.cpus_per_worker)(build_graph)
        parts = [task.remote(config, index.dim, index.precision, vectors[a:b], labels[a:b])
                 for a, b in shard_bounds(len(labels), n)]
        blobs = ray.get(parts)
    finally:
        if owns:
            ray.shutdown()
    index.adopt([shard_from_bytes(index, b) for b in blobs], label_ranges(labels, n))
    return {"shards": n, "vectors": len(index), "shard_vectors": [len(s) for s in index.shards]}
