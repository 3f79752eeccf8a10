"""Does `ragcost plan`'s RAM per vector match a measured build? One build per kind, model beside measurement.

    python -m bench.plan_ram [--n 200000 --dim 384 --kinds hnsw,ivf_pq,pgvector-hnsw]

Synthetic vectors (bench.common.synthetic), built through ragcost, each kind in a fresh process:
- ``hnsw``: hnswlib's resident memory, /proc/self/statm before and after the build (the input
  vectors allocated before);
- ``ivf_pq``: faiss's serialized index (what a loaded index allocates: codes, ids, centroids,
  codebooks; RSS is noisy here, training scratch is freed but not returned to the OS);
- ``pgvector-hnsw``: ``pg_relation_size`` of the HNSW index (pgvector: RAGCOST_BENCH_PGVECTOR_URL,
  else RAGCOST_TEST_PGVECTOR_URL; eval "$(scripts/start_pgvector.sh)").
ef_construction is low (32): memory does not depend on it, build time does. Pass: model within 5%.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any


from bench import common as C
from ragcost.cost.capacity import index_structure_bytes

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def measure(kind: str, n: int, dim: int, M: int, pq_m: int) -> dict[str, Any]:
    from ragcost.config.index import IndexConfig
    from ragcost.index import build_index

    x, _, _ = C.synthetic(n, dim)
    labels = C.labels_for(n)
    t0 = time.perf_counter()
    if kind == "hnsw":
        cfg = IndexConfig(backend="hnswlib", kind="hnsw", build={"M": M, "ef_construction": 32})
        from ragcost.index import index_registry

        index = index_registry.get("hnswlib")(cfg, dim)  # build() on the data as given: no sorted copy inside the window
        before = rss()
        index.build(x, labels)
        measured, how = rss() - before, "resident memory added by the build (/proc/self/statm)"
    elif kind == "ivf_pq":
        import faiss

        cfg = IndexConfig(backend="faiss", kind="ivf_pq", build={"m": pq_m, "nbits": 8})
        index = build_index(cfg, x, labels)
        measured, how = len(faiss.serialize_index(index._index)), "faiss.serialize_index bytes"
    else:
        cfg = IndexConfig(backend="pgvector", kind="hnsw", build={"m": M, "ef_construction": 32})
        cfg.at_store(C.pgvector_url(), f"rc_plan_ram_{n}x{dim}")
        index = build_index(cfg, x, labels)
        conn = index._live()
        measured = int(conn.execute("SELECT pg_relation_size(%s::regclass)", (f'"{index._index_name}"',)).fetchone()[0])
        how = "pg_relation_size of the hnsw index"
    seconds = time.perf_counter() - t0
    model = index_structure_bytes(n, dim, kind, M=M, pq_m=pq_m)
    ratio = model / measured
    return {"kind": kind, "n": n, "dim": dim, "measured_bytes": measured, "model_bytes": model,
            "measured_bytes_per_vector": round(measured / n, 2), "model_bytes_per_vector": round(model / n, 2),
            "model_over_measured": round(ratio, 4), "how": how, "build_seconds": round(seconds, 1),
            "pass_within_5pct": abs(ratio - 1) <= 0.05}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--pq-m", type=int, default=48)
    ap.add_argument("--kinds", default="hnsw,ivf_pq,pgvector-hnsw")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # run one kind in this process, print its JSON row
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.n, args.dim, args.M, args.pq_m)))
        return {}
    t0 = time.perf_counter()
    rows = []
    for kind in args.kinds.split(","):
        cmd = [sys.executable, "-m", "bench.plan_ram", "--one", kind, "--n", str(args.n), "--dim", str(args.dim),
               "--M", str(args.M), "--pq-m", str(args.pq_m)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    result = {"benchmark": "plan_ram", "data": {"n": args.n, "dim": args.dim, "kind": C.SYNTHETIC_NOTE},
              "machine": C.machine(), "kinds": {r["kind"]: r for r in rows},
              "pass": all(r["pass_within_5pct"] for r in rows), "seconds": round(time.perf_counter() - t0, 1)}
    C.emit(result)
    return result


if __name__ == "__main__":
    main()
