"""Shards served by Ray actors against the in-process sharded index: same top 10, latency, throughput, RAM.

    python -m bench.shard_actors [--n 100000 --dim 32 --shards 4 --queries 1000 --batch 100]

Starts a real 2-node Ray cluster on loopback (tests/ray_cluster.py: ``ray start --head`` + one
worker node, 1 CPU each), builds one seeded synthetic sharded hnswlib index here, and searches the
same file two ways: in this process (``ShardedIndex``, the shards walked one after another) and
from ``shards`` actors (``index: {serve: {on: ray}}``, placed with SPREAD, each with
``cpus_per_shard``), single queries and batches of ``--batch``. Prints JSON (also written to
bench/out/shard_actors.json): recall@10 of the actors against the in-process top 10, p50/p95 per
single query and per batch, queries per second, each actor's node, CPU-seconds (measured inside the
actor) and the RSS its shard's load added, beside ``nbytes()`` and ``ragcost plan``'s corpus-mode bytes
for a shard of that size. Pass: recall 1.0; the p50 fields say whether the actors were no slower.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import common as C


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--cpus-per-shard", type=float, default=0.5)
    args = ap.parse_args()

    import ray

    from ragcost.config.index import IndexConfig, ServeShards
    from ragcost.config.pipeline import RayOptions
    from ragcost.cost.capacity import index_structure_bytes
    from ragcost.index import index_registry
    from ragcost.index.sharded import new_index
    from ragcost.runtime.shard_actors import served_class
    from tests.ray_cluster import LocalRayCluster

    M = 16
    cfg = IndexConfig(backend="hnswlib", kind="hnsw", build={"M": M, "ef_construction": 100}, search={"ef": 64},
                      shards=args.shards, serve=ServeShards(on="ray", cpus_per_shard=args.cpus_per_shard, timeout_s=120))
    x, _, _ = C.synthetic(args.n, args.dim)
    labels = C.labels_for(args.n)
    q = np.ascontiguousarray(C.synthetic_queries(args.queries, args.dim)[0], np.float32)
    out: dict = {"bench": "shard_actors", "n": args.n, "dim": args.dim, "shards": args.shards, "queries": len(q),
                 "batch": args.batch, "cpus_per_shard": args.cpus_per_shard, "machine": C.machine()}
    t0 = time.perf_counter()
    local = new_index(cfg, args.dim)
    local.build(x, labels)
    out["build_seconds_here"] = round(time.perf_counter() - t0, 2)
    with tempfile.TemporaryDirectory() as tmp, LocalRayCluster(nodes=2, cpus_per_node=1) as cluster:
        path = Path(tmp) / "index.shards"
        local.save(path)
        remote = served_class(index_registry.get("hnswlib"))(cfg, args.dim)
        t0 = time.perf_counter()
        remote.start(path, x, labels, RayOptions(address=cluster.address), local.nbytes())
        out["actors_start_seconds"] = round(time.perf_counter() - t0, 2)
        try:
            for _ in range(20):  # warm both paths
                local.search(q[:1], 10)
                remote.search(q[:1], 10)
            remote.take_reports()
            _, ref = local.search(q, 10)
            _, got = remote.search(q, 10)
            out["recall_at_10_vs_in_process"] = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ref, got)]))
            out["identical_top10_rows"] = int((ref == got).all(axis=1).sum())
            remote.take_reports()
            load0 = os.getloadavg()[0]
            single = {"in_process": C.time_each(lambda v: local.search_one(v[0], 10), q),
                      "actors": C.time_each(lambda v: remote.search_one(v[0], 10), q)}
            batches = [q[i:i + args.batch] for i in range(0, len(q), args.batch)]
            per_batch = {"in_process": [C.time_call(lambda b=b: local.search(b, 10)) for b in batches],
                         "actors": [C.time_call(lambda b=b: remote.search(b, 10)) for b in batches]}
            reports = remote.take_reports()
            out["load_avg_during"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
            for name in ("in_process", "actors"):
                s = single[name]
                out[f"single_{name}"] = {"p50_us": C.pct_us(s, 50), "p95_us": C.pct_us(s, 95),
                                         "qps": round(len(s) / float(np.sum(s)), 1)}
                b = per_batch[name]
                out[f"batch_{name}"] = {"p50_ms": round(C.pct_us(b, 50) / 1000, 3), "p95_ms": round(C.pct_us(b, 95) / 1000, 3),
                                        "qps": round(len(q) / float(np.sum(b)), 1)}
            out["single_p50_actors_over_in_process"] = round(out["single_actors"]["p50_us"] / out["single_in_process"]["p50_us"], 2)
            out["batch_p50_actors_over_in_process"] = round(out["batch_actors"]["p50_ms"] / out["batch_in_process"]["p50_ms"], 2)
            cpu = {}
            for r in reports:
                for c in r.calls:
                    cpu[c.shard] = cpu.get(c.shard, 0.0) + c.cpu_seconds
            info = ray.get([a.info.remote() for a in remote.actors])
            out["per_shard"] = [
                {"shard": i, "node": p["node"], "vectors": p["vectors"], "cpu_seconds_in_actor": round(cpu.get(i, 0.0), 3),
                 "nbytes": p["index_bytes"], "loaded_rss_bytes": p["loaded_rss_bytes"],
                 "plan_index_bytes": int(index_structure_bytes(p["vectors"], args.dim, "hnsw", M=M)),
                 "plan_over_measured_rss": round(index_structure_bytes(p["vectors"], args.dim, "hnsw", M=M)
                                                 / max(p["loaded_rss_bytes"], 1), 3)}
                for i, p in enumerate(info)]
            out["nodes_used"] = sorted({p["node"] for p in info})
        finally:
            remote.close()
            if ray.is_initialized():
                ray.shutdown()
    out["pass"] = out["recall_at_10_vs_in_process"] == 1.0
    out["p50_no_worse"] = {"single": out["single_p50_actors_over_in_process"] <= 1.0,
                           "batch": out["batch_p50_actors_over_in_process"] <= 1.0}
    Path("bench/out").mkdir(parents=True, exist_ok=True)
    Path("bench/out/shard_actors.json").write_text(json.dumps(out, indent=2, default=float))
    C.emit(out)


if __name__ == "__main__":
    main()
