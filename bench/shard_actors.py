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

The variants run interleaved (each query, and each batch ``--batch-repeats`` times, through every
variant in turn, the order rotating), so the machine's load falls on all alike: ``in_process``;
``actors`` (the served index as configured by default, ``channel: tcp``: each search straight to the
actors over their sockets); ``actors_ray`` (the same actors, ``channel: ray``: each search a Ray actor
call, the matrix inlined); ``noop_fanout`` (four Ray calls with the matrix to an actor method that
does nothing: Ray's per-fan-out floor, no search, no merge); ``noop_channel`` (the same over the
channels: the sockets' floor). ``--compiled`` replaces ``actors_ray``
with the same search through a Ray Compiled Graph (shared-memory channels;
bench/out/shard_actors_compiled.json).
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


def compiled_variant(remote):
    """(one, batch) search functions through a Ray Compiled Graph of the actors' ``search`` (k 10, no
    filter), merged as the served index merges; and the graph, to tear down."""
    from ray.dag import InputNode, MultiOutputNode

    from ragcost.index.sharded import merge_top_k

    with InputNode() as inp:
        dag = MultiOutputNode([a.search.bind(inp, 10, None, None) for a in remote.actors]).experimental_compile()

    def batch(b):
        import ray

        got = ray.get(dag.execute(np.ascontiguousarray(b, np.float32)))
        return merge_top_k([g["scores"] for g in got], [g["labels"] for g in got], 10)

    return (lambda v: batch(v), batch), dag


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--cpus-per-shard", type=float, default=0.5)
    ap.add_argument("--batch-repeats", type=int, default=3, help="times each batch runs per variant")
    ap.add_argument("--compiled", action="store_true", help="add a variant through a Ray Compiled Graph over the "
                    "same actors (shared-memory channels), in place of actors_ray; writes shard_actors_compiled.json")
    args = ap.parse_args()
    if args.compiled:  # its first call sets the graph up (seconds on a loaded machine): past Ray's 10 s default
        os.environ.setdefault("RAY_CGRAPH_get_timeout", "300")

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
            # A/B interleaved: each query (and each batch) runs through every variant in turn, the order
            # rotating, so load from the other users of the machine falls on all of them alike.
            # actors_ray: the same actors with the channels set aside, every search a Ray call.
            def variant(name: str):
                if name == "noop_fanout":  # the same 4 calls with the matrix, no search: Ray's floor
                    def ping(b):
                        return ray.get([a.ping.remote(np.ascontiguousarray(b, np.float32)) for a in remote.actors])
                    return lambda v: ping(v), ping
                if name == "noop_channel":  # the same requests over the channels, no search: the sockets' floor
                    def ping_channel(b):
                        b = np.ascontiguousarray(b, np.float32)
                        for c in clients:
                            c.send({"op": "ping"}, [("queries", b)])
                        return [c.receive(60) for c in clients]
                    return lambda v: ping_channel(v), ping_channel

                def run(b):
                    remote._clients = [] if name == "actors_ray" else clients  # [] : every search a Ray call
                    return local.search(b, 10) if name == "in_process" else remote.search(b, 10)
                def one(v):
                    remote._clients = [] if name == "actors_ray" else clients
                    return local.search_one(v[0], 10) if name == "in_process" else remote.search_one(v[0], 10)
                return one, run
            clients = remote._clients
            names = ("in_process", "actors", "compiled" if args.compiled else "actors_ray", "noop_fanout", "noop_channel")
            fns = {n: variant(n) for n in names}
            if args.compiled:
                fns["compiled"], dag = compiled_variant(remote)
                t0 = time.perf_counter()
                fns["compiled"][1](q[:1])
                out["compiled_first_call_seconds"] = round(time.perf_counter() - t0, 2)
                _, got_c = fns["compiled"][1](q)
                out["compiled_recall_at_10_vs_in_process"] = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ref, got_c)]))
            single = {n: [] for n in names}
            for i in range(len(q)):
                for j in range(len(names)):
                    n = names[(i + j) % len(names)]
                    single[n].append(C.time_call(lambda: fns[n][0](q[i:i + 1])))
            batches = [q[i:i + args.batch] for i in range(0, len(q), args.batch)]
            per_batch = {n: [] for n in names}
            for rep in range(args.batch_repeats):
                for i, b in enumerate(batches):
                    for j in range(len(names)):
                        n = names[(i + j + rep) % len(names)]
                        per_batch[n].append(C.time_call(lambda: fns[n][1](b)))
            remote._clients = clients
            if args.compiled:
                dag.teardown()
            reports = remote.take_reports()
            out["load_avg_during"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
            for name in names:
                s = single[name]
                out[f"single_{name}"] = {"p50_us": C.pct_us(s, 50), "p95_us": C.pct_us(s, 95),
                                         "qps": round(len(s) / float(np.sum(s)), 1)}
                b = per_batch[name]
                out[f"batch_{name}"] = {"p50_ms": round(C.pct_us(b, 50) / 1000, 3), "p95_ms": round(C.pct_us(b, 95) / 1000, 3),
                                        "qps": round(len(b) * args.batch / float(np.sum(b)), 1)}
            for name in names[1:]:
                out[f"single_p50_{name}_over_in_process"] = round(out[f"single_{name}"]["p50_us"] / out["single_in_process"]["p50_us"], 2)
                out[f"batch_p50_{name}_over_in_process"] = round(out[f"batch_{name}"]["p50_ms"] / out["batch_in_process"]["p50_ms"], 2)
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
    out["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    Path("bench/out").mkdir(parents=True, exist_ok=True)
    name = "shard_actors_compiled.json" if args.compiled else "shard_actors.json"
    Path("bench/out", name).write_text(json.dumps(out, indent=2, default=float))
    C.emit(out)


if __name__ == "__main__":
    main()
