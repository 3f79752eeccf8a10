"""``executor: ray`` builds the kinds a backend declares ``trained_shards`` (faiss's IVF-Flat and IVF-PQ)
in shards merged into one, and HNSW graphs in shards, kept as shards (``ragcost.index.sharded``).

The driver has the backend train the empty index once on a sample (faiss: k-means and PQ codebooks on
what faiss itself would subsample to), ships it to ``workers`` Ray tasks, each adds one shard of the
stored vectors under their labels through the backend's ``add_shard``, and the backend merges the
shards into the trained index (faiss: ``merge_from``, labels kept). The result is the same structure
a local build makes, held as the backend's own ``load`` holds it, and written as the same artifact.

An HNSW kind has no merge: each of the ``shards`` Ray tasks builds the backend's own graph over one
contiguous label range of the stored vectors and returns its saved file's bytes; the driver keeps
the graphs as one ``ShardedIndex`` whose searches walk them all and merge the top k.
Flat, binary IVF and GPU builds stay local.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.config.pipeline import RayOptions


def add_shard(cls: Any, trained: bytes, vectors: np.ndarray, labels: np.ndarray) -> bytes:
    """Run on a worker: the backend's own add of one shard to the trained index."""
    return cls.add_shard(trained, vectors, labels)


def build_sharded(index: Any, vectors: np.ndarray, labels: np.ndarray, opts: RayOptions,
                  shards: int | None = None) -> dict[str, Any]:
    """Build ``index`` (of a kind its backend trains once and fills in shards) on the cluster; returns what the
    build did, per shard."""
    from ragcost.runtime.ray_executor import connect

    vectors = np.ascontiguousarray(vectors, np.float32)
    labels = np.ascontiguousarray(labels, np.int64)
    blob, trained_on = index.trained_for_shards(vectors)
    n = shards or opts.workers
    bounds = np.linspace(0, len(vectors), n + 1).astype(int)
    ray, owns = connect(opts)
    try:
        task = ray.remote(num_cpus=opts.cpus_per_worker)(add_shard)
        ref = ray.put(blob)
        parts = [task.remote(type(index), ref, vectors[a:b], labels[a:b]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        got = ray.get(parts)
    finally:
        if owns:
            ray.shutdown()
    total = index.adopt_shards(blob, got)
    return {"shards": len(parts), "trained_on": int(trained_on), "vectors": total}


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
