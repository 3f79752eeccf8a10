"""Is an hnswlib index charged the RAM it takes once loaded? ``nbytes()`` against RSS growth on load.

    python -m bench.hnswlib_ram [--n 50000 --dim 384 --M 16]

Builds the index through ragcost (seeded synthetic vectors, bench.common.synthetic), saves it, then
in a fresh process loads it the way a query loads it and measures resident memory before and after
(/proc/self/statm). Prints the measured growth beside ``nbytes()`` (what query and eval charge)
and ``ragcost plan``'s figure for the same n, dim and M. Pass: nbytes within 10% of the growth, and
plan's bytes per vector within 1% of query's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _index(dim: int, M: int):
    from ragcost.config.index import IndexConfig
    from ragcost.index import index_registry

    cfg = IndexConfig(backend="hnswlib", kind="hnsw", build={"M": M, "ef_construction": 32})
    return index_registry.get("hnswlib")(cfg, dim)


def build(path: Path, n: int, dim: int, M: int) -> None:
    from bench import common as C

    x, _, _ = C.synthetic(n, dim)
    idx = _index(dim, M)
    idx.build(x, C.labels_for(n))
    idx.save(path)


def load(path: Path, dim: int, M: int) -> dict:
    import hnswlib  # noqa: F401  (the library's own import is not the index's memory)

    idx = _index(dim, M)
    before = rss()
    idx.load(path)
    grown = rss() - before
    return {"rss_growth_bytes": grown, "nbytes": idx.nbytes(), "count": len(idx)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--load", type=Path)
    args = ap.parse_args()
    if args.load:
        print(json.dumps(load(args.load, args.dim, args.M)))
        return
    from ragcost.cost.capacity import index_structure_bytes

    path = Path(tempfile.mkdtemp(prefix="ragcost-hnsw-")) / "index.bin"
    build(path, args.n, args.dim, args.M)
    res = subprocess.run([sys.executable, "-m", "bench.hnswlib_ram", "--load", str(path), "--dim", str(args.dim),
                          "--M", str(args.M)], capture_output=True, text=True, check=True)
    got = json.loads(res.stdout.strip().splitlines()[-1])
    plan = index_structure_bytes(args.n, args.dim, "hnsw", M=args.M)
    ratio = got["nbytes"] / got["rss_growth_bytes"]
    out = {"bench": "hnswlib_ram", "n": args.n, "dim": args.dim, "M": args.M, **got, "plan_bytes": plan,
           "nbytes_over_rss": ratio, "query_bytes_per_vector": got["nbytes"] / args.n,
           "plan_bytes_per_vector": plan / args.n, "plan_over_query": plan / got["nbytes"],
           "pass": abs(ratio - 1) <= 0.10 and abs(plan / got["nbytes"] - 1) <= 0.01}
    os.remove(path)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
