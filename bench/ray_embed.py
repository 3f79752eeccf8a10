"""Embedding throughput: the local executor vs ``executor: ray`` with 2 workers on this machine's 2 cores.

    python -m bench.ray_embed [--texts 1536 --repeats 2]

The same texts (chunks of Python's pydoc topics, ~60 words) are embedded in write batches of
32 texts (the indexer's transaction size), by the local executor (one process, torch's default
threads, as ``ragcost index`` runs) and by Ray (``RayEmbedding``: Ray Data ``map_batches`` over 2
actors, 1 CPU each, on a 2-node cluster started here: ``ray start --head`` + one worker node).
Runs alternate (local, ray, local, ray ...) and medians are reported, since the machine is shared.

- ``local.texts_per_s``: texts / wall seconds of the embedding loop (model already loaded).
- ``ray.steady_texts_per_s``: texts after the first batch / seconds from the first batch's arrival
  at the driver to the last's -- the rate once the actors are up (what a long corpus sees).
- ``ray.end_to_end_texts_per_s``: texts / wall seconds including starting the actors and loading
  the model in each (what a short run sees).
- ``ray.per_worker``: each actor's texts / its own busy seconds -- the measured base for a build-time plan.
- ``ratio`` = ray steady / local; target >= 0.9 (Ray's overhead costs at most 10%).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = 0.9
WRITE_BATCH = 32


def _config(workers: int):
    from ragcost.config.pipeline import PipelineConfig

    return PipelineConfig(name="bench", executor="ray", ray={"workers": workers, "cpus_per_worker": 1})


def local_run(emb, parts: list[list[str]]) -> float:
    from ragcost.runtime.indexing import EMBED_CHUNKS
    from ragcost.runtime.ray_executor import embed_in_pieces

    t0 = time.perf_counter()
    for texts in parts:
        embed_in_pieces(emb, texts, EMBED_CHUNKS)
    return time.perf_counter() - t0


def ray_run(address: str, emb, parts: list[list[str]], workers: int) -> dict:
    from ragcost.runtime.indexing import EMBED_CHUNKS
    from ragcost.runtime.ray_executor import RayEmbedding

    cfg = _config(workers).model_copy(update={"ray": _config(workers).ray.model_copy(update={"address": address})})
    t0 = time.perf_counter()
    arrivals, busy, done = [], {}, {}
    with RayEmbedding(cfg, None, emb, EMBED_CHUNKS) as r:
        for got in r.embed(parts):
            arrivals.append((time.perf_counter(), len(got.vectors)))
            busy[got.worker] = busy.get(got.worker, 0.0) + got.seconds
            done[got.worker] = done.get(got.worker, 0) + got.embedded
    wall = time.perf_counter() - t0
    steady_n = sum(n for _, n in arrivals[1:])
    steady_s = arrivals[-1][0] - arrivals[0][0]
    return {"wall_s": wall, "steady_texts_per_s": steady_n / steady_s if steady_s > 0 else float("nan"),
            "end_to_end_texts_per_s": sum(n for _, n in arrivals) / wall,
            "per_worker": {w: {"texts": done[w], "busy_s": round(busy[w], 2), "texts_per_s": round(done[w] / busy[w], 1)}
                           for w in sorted(done)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=1536, help="at most the 1,118 pydoc-topic chunks there are")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from bench.embed import texts as corpus_texts
    from ragcost.config.pipeline import EmbedConfig
    from ragcost.embed import make_embedder
    from tests.ray_cluster import LocalRayCluster

    corpus = corpus_texts(args.texts)
    parts = [corpus[i : i + WRITE_BATCH] for i in range(0, len(corpus), WRITE_BATCH)]
    emb = make_embedder(EmbedConfig())
    emb.warm_up()
    emb.embed(corpus[:WRITE_BATCH])  # first call pays one-off set-up
    local_s, rays = [], []
    with LocalRayCluster(nodes=args.workers, cpus_per_node=1) as cluster:
        for _ in range(args.repeats):
            local_s.append(local_run(emb, parts))
            rays.append(ray_run(cluster.address, emb, parts, args.workers))
    local_tps = len(corpus) / statistics.median(local_s)
    steady = statistics.median(r["steady_texts_per_s"] for r in rays)
    e2e = statistics.median(r["end_to_end_texts_per_s"] for r in rays)
    best = max(rays, key=lambda r: r["steady_texts_per_s"])
    out = {
        "texts": len(corpus), "write_batch": WRITE_BATCH, "repeats": args.repeats, "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "local": {"texts_per_s": round(local_tps, 1), "runs_s": [round(s, 2) for s in local_s]},
        "ray": {"workers": args.workers, "steady_texts_per_s": round(steady, 1), "end_to_end_texts_per_s": round(e2e, 1),
                "runs_wall_s": [round(r["wall_s"], 2) for r in rays], "per_worker": best["per_worker"]},
        "ratio": round(steady / local_tps, 3), "ratio_end_to_end": round(e2e / local_tps, 3), "target": TARGET,
    }
    out["pass"] = out["ratio"] >= TARGET
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
