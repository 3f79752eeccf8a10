"""The floor of a fan-out over processes on this machine, Ray aside: the same shards searched in
this process one after another, and over ragcost's shard channel from plain processes.

    python -m bench.shard_fanout_floor [--n 100000 --dim 32 --shards 4 --queries 600]

bench.shard_actors measures the served index (Ray actors); this asks what any design that puts
the shards in other processes on the same cores could reach. Each process builds its own seeded
synthetic shards (bench.common.synthetic, hnswlib M 16, ef_construction 100, ef 64, one thread,
as bench.shard_actors), the driver builds the same shards for the walk, and ChannelServer /
ChannelClient (ragcost/runtime/shard_channel.py: token, framing, no pickle) carry each search.
Two layouts: one process per shard, and the shards split over two processes (one per core), each
searching its shards one after another. Single queries, the two paths interleaved query by query;
p50 after 50 warm-up queries. Prints JSON (bench/out/shard_fanout_floor.json).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import secrets
import statistics
import time
from pathlib import Path

import numpy as np

from bench import common as C

OUT = Path(__file__).resolve().parent / "out" / "shard_fanout_floor.json"


def _shard(x: np.ndarray, i: int, shards: int):
    import hnswlib

    part = x[i::shards]
    ix = hnswlib.Index("cosine", x.shape[1])
    ix.init_index(len(part), 16, 100)
    ix.add_items(part, np.arange(i, len(x), shards), num_threads=1)
    ix.set_ef(64)
    ix.set_num_threads(1)
    return ix


def _serve(token: bytes, queue, n: int, dim: int, shard_ids: list[int], shards: int) -> None:
    from ragcost.runtime.shard_channel import ChannelServer

    x, _, _ = C.synthetic(n, dim)
    own = [_shard(x, i, shards) for i in shard_ids]

    def handle(op: str, header: dict, arrays: dict) -> dict:
        out = [ix.knn_query(arrays["q"], int(header["k"])) for ix in own]
        return {"labels": np.concatenate([o[0] for o in out], 1).astype(np.int64),
                "distances": np.concatenate([o[1] for o in out], 1).astype(np.float32)}

    server = ChannelServer("127.0.0.1", token, handle)
    queue.put(server.address)
    time.sleep(10**6)


def _merge(labels: list[np.ndarray], distances: list[np.ndarray], k: int) -> np.ndarray:
    """The sharded index's own merge (best score first, ties by label) over hnswlib's cosine distances."""
    from ragcost.index.sharded import merge_top_k

    return merge_top_k([-d for d in distances], labels, k)[1]


def layout(groups: list[list[int]], args, local: list, q: np.ndarray) -> dict:
    from ragcost.runtime.shard_channel import ChannelClient

    token = secrets.token_hex(16).encode()
    queue: mp.Queue = mp.Queue()
    procs = [mp.Process(target=_serve, args=(token, queue, args.n, args.dim, g, args.shards), daemon=True) for g in groups]
    for p in procs:
        p.start()
    clients: list = []
    try:
        clients = [ChannelClient(tuple(queue.get(timeout=600)), token, 5.0) for _ in procs]
        walk, fan, same = [], [], 0
        for i in range(len(q)):
            x1 = q[i:i + 1]
            t0 = time.perf_counter()
            out = [ix.knn_query(x1, 10) for ix in local]
            ref = _merge([o[0] for o in out], [o[1] for o in out], 10)
            walk.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for c in clients:
                c.send({"op": "search", "k": 10}, [("q", x1)])
            rs = [c.receive(30) for c in clients]
            got = _merge([r["labels"] for r in rs], [r["distances"] for r in rs], 10)
            fan.append(time.perf_counter() - t0)
            same += int((got == ref).all())
        w, f = statistics.median(walk[50:]) * 1e3, statistics.median(fan[50:]) * 1e3
        return {"processes": len(groups), "shards_per_process": [len(g) for g in groups], "identical_top10": same,
                "walk_p50_ms": round(w, 3), "fanout_p50_ms": round(f, 3), "fanout_over_walk": round(f / w, 3)}
    finally:
        for c in clients:
            c.close()
        for p in procs:
            p.terminate()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--queries", type=int, default=600)
    args = ap.parse_args()
    x, _, _ = C.synthetic(args.n, args.dim)
    local = [_shard(x, i, args.shards) for i in range(args.shards)]
    q = np.ascontiguousarray(C.synthetic_queries(args.queries, args.dim)[0], np.float32)
    half = args.shards // 2 or 1
    out = {"bench": "shard_fanout_floor", "n": args.n, "dim": args.dim, "shards": args.shards, "queries": args.queries,
           "machine": C.machine(), "loadavg_start": os.getloadavg()[0], "layouts": [
               layout([[i] for i in range(args.shards)], args, local, q),
               layout([list(range(half)), list(range(half, args.shards))], args, local, q)]}
    out["loadavg_end"] = os.getloadavg()[0]
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
