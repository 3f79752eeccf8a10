"""Sharded HNSW vs one graph: build time, recall@10 against exact search, search speed and bytes.

    python -m bench.sharded_hnsw [--n 100000 --dim 384 --shards 2 --queries 1000 --ef 64]

Seeded synthetic vectors (``bench.common.synthetic``) under store-like labels. One hnswlib graph
is built here with every core (``threads: 0``, as a local ``ragcost index`` builds it). The sharded
index is built as ``executor: ray`` builds it (``ragcost.runtime.ray_shards.build_graph_shards``:
one Ray task per shard, 1 CPU each) on a cluster of ``--shards`` nodes started here
(``ray start --head`` + worker nodes, tests/ray_cluster.py), or on ``--ray ADDRESS``; ``--local``
builds the shards one after another in this process instead (no Ray). Both use the default build
parameters (M 16, ef_construction 200) and are searched at the same ``ef``.

- ``build_s``: wall seconds of the build (Ray: from submitting the tasks to holding every shard,
  vectors shipped and graphs shipped back included; the cluster's start-up is not).
- ``recall_at_10``: against exact inner-product top 10 over all vectors.
- ``batch_qps``: queries a second through ``search`` with all queries in one call.
- ``p50_us``: median single-query latency through ``search_one``.
- ``index_bytes`` (the storage cost's input; the sharded index's is the sum over shards) and
  ``largest_shard_bytes`` (what the biggest machine must hold).
- ``pass``: sharded recall >= one graph's - 0.02.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Optional

import numpy as np

from bench.common import emit, ground_truth, labels_for, machine, pct_us, recall_at_k, synthetic, synthetic_queries

K = 10
SINGLE = 300  # queries timed one by one


def _searched(index: Any, q: np.ndarray, truth: np.ndarray) -> dict[str, Any]:
    t0 = time.perf_counter()
    _, found = index.search(q, K)
    batch_s = time.perf_counter() - t0
    each = []
    for v in q[:SINGLE]:
        t = time.perf_counter()
        index.search_one(v, K)
        each.append(time.perf_counter() - t)
    return {"recall_at_10": round(recall_at_k(found, truth), 4), "batch_qps": round(len(q) / batch_s, 1),
            "p50_us": pct_us(each, 50)}


def _sharded_build(cfg: Any, x: np.ndarray, labels: np.ndarray, shards: int, local: bool,
                   address: Optional[str]) -> tuple[Any, float, str]:
    from ragcost.index import new_index

    index = new_index(cfg, x.shape[1], shards=shards)
    if local:
        t0 = time.perf_counter()
        index.build(x, labels)
        return index, time.perf_counter() - t0, "local, one shard after another"
    from ragcost.config.pipeline import RayOptions
    from ragcost.runtime.ray_shards import build_graph_shards

    def on(addr: str) -> float:
        t0 = time.perf_counter()
        build_graph_shards(index, x, labels, RayOptions(address=addr, workers=shards, cpus_per_worker=1))
        return time.perf_counter() - t0

    if address:
        return index, on(address), f"ray at {address}, {shards} tasks x 1 CPU"
    from tests.ray_cluster import LocalRayCluster

    with LocalRayCluster(nodes=shards, cpus_per_node=1) as cluster:
        return index, on(cluster.address), f"ray, {shards}-node local cluster, {shards} tasks x 1 CPU"


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--ef", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--local", action="store_true", help="build the shards here, one after another (no Ray)")
    ap.add_argument("--ray", default=None, help="an existing cluster's address (default: start one here)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from ragcost.config.index import IndexConfig
    from ragcost.index import build_index

    start = machine()
    x, _, _ = synthetic(args.n, args.dim, seed=args.seed)
    labels = labels_for(args.n)
    q, _ = synthetic_queries(args.queries, args.dim, seed=args.seed)
    truth = ground_truth(x, labels, q, K)
    cfg = IndexConfig(backend="hnswlib", kind="hnsw", search={"ef": args.ef})

    t0 = time.perf_counter()
    one = build_index(cfg, x, labels)
    one_s = time.perf_counter() - t0
    sharded, sharded_s, how = _sharded_build(cfg, x, labels, args.shards, args.local, args.ray)

    result: dict[str, Any] = {
        "benchmark": "sharded_hnsw", "n": args.n, "dim": args.dim, "queries": args.queries, "ef": args.ef,
        "build": dict(M=16, ef_construction=200), "seed": args.seed, "machine": start,
        "one_graph": {"build_s": round(one_s, 2), "threads": "all cores", **_searched(one, q, truth),
                      "index_bytes": one.nbytes()},
        "sharded": {"shards": len(sharded.shards), "built": how, "build_s": round(sharded_s, 2),
                    **_searched(sharded, q, truth), "index_bytes": sharded.nbytes(),
                    "largest_shard_bytes": max(s.nbytes() for s in sharded.shards),
                    "shard_vectors": [len(s) for s in sharded.shards]},
        "load_avg_at_end": list(os.getloadavg()),
    }
    result["pass"] = {"recall_sharded_ge_one_graph_minus_0.02":
                      result["sharded"]["recall_at_10"] >= result["one_graph"]["recall_at_10"] - 0.02}
    emit(result)


if __name__ == "__main__":
    main()
