"""A backend's kinds built in trained shards (what `executor: ray` runs), without the cluster."""

from __future__ import annotations

import numpy as np


def test_ivf_trained_once_and_filled_in_shards_is_the_local_build():
    """What `executor: ray` runs, without the cluster: train once, each shard added on its own copy, merged."""
    from ragcost.config.index import IndexConfig
    from ragcost.index.faiss_index import FaissIndex
    from ragcost.testing.vectors import clustered_vectors

    x, _ = clustered_vectors(3_000, 32, seed=5)
    labels = np.arange(len(x), dtype=np.int64) * 7 + 3
    cfg = IndexConfig(backend="faiss", kind="ivf_flat", build={"nlist": 8}, search={"nprobe": 8})
    local, sharded = FaissIndex(cfg, 32), FaissIndex(cfg, 32)
    local.build(x, labels)
    assert sharded.builds_in_shards() and not FaissIndex(IndexConfig(backend="faiss", kind="hnsw"), 32).builds_in_shards()
    blob, trained_on = sharded.trained_for_shards(x)
    assert trained_on == 256 * 8  # faiss's own cap: 256 points per centroid
    parts = [FaissIndex.add_shard(blob, x[a:b], labels[a:b]) for a, b in ((0, 1000), (1000, 2200), (2200, 3000))]
    assert sharded.adopt_shards(blob, parts) == len(x) == len(sharded)
    a, b = local.search(x[:100], 5)[1], sharded.search(x[:100], 5)[1]
    assert (a[:, 0] == labels[:100]).all() and (b[:, 0] == labels[:100]).all()  # nprobe = nlist: exact, labels kept
