"""Does wrapping hnswlib/faiss in ragcost cost anything? Same index, raw vs the Retrieve stage.

    python -m bench.overhead [--n 100000 --dim 384 --batch 1000 --single 300 --repeats 5]

Per index: batch QPS, single-query p50/p99 and recall@k against exact search, raw and through
ragcost (per_document=False: pure chunk retrieval, like for like), their ratio, and the
per_document=True cost. Raw and ragcost runs are interleaved and repeated; medians are reported.
See bench/common.py for exactly what "through ragcost" includes.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import numpy as np

from bench import common as C
from ragcost.index import build_params, search_params
from ragcost.index.faiss_index import auto_nlist


def raw_searcher(art, threads: int) -> Callable[[np.ndarray, int], Any]:
    """The library call a raw user makes, with the same parameters and threads as ragcost's config."""
    cfg = art.index.config
    if cfg.backend == "pgvector":
        return pgvector_raw(art)
    lib = art.index._index
    if cfg.backend == "hnswlib":
        lib.set_ef(int(search_params(cfg).ef))
        nt = threads or -1
        return lambda q, k: lib.knn_query(q, k=k, num_threads=nt)
    import faiss

    if threads:
        faiss.omp_set_num_threads(threads)
    if cfg.kind == "hnsw":
        faiss.downcast_index(lib.index).hnsw.efSearch = int(search_params(cfg).ef)
    elif cfg.kind in ("ivf_flat", "ivf_pq"):
        faiss.extract_index_ivf(lib).nprobe = int(search_params(cfg).nprobe)
    return lambda q, k: lib.search(q, k)


def pgvector_raw(art) -> Callable[[np.ndarray, int], Any]:
    """What a psycopg user writes: one prepared ORDER BY <#> LIMIT k statement per query, own connection."""
    import psycopg

    from ragcost.index.pg_sql import libpq_url, vector_literal

    ix = art.index
    conn = psycopg.connect(libpq_url(ix.config.store_location[0]), autocommit=True)
    if ix.config.kind == "hnsw":
        conn.execute(f"SET hnsw.ef_search = {int(search_params(ix.config).ef_search)}")
    sql = (f'SELECT label, "{ix._column}" <#> %s::vector AS d FROM "{ix._table}" '
           f'WHERE "{ix._column}" IS NOT NULL ORDER BY d LIMIT %s')

    def search(q: np.ndarray, k: int) -> list[list[tuple]]:
        return [conn.execute(sql, (vector_literal(v), k), prepare=True).fetchall() for v in q]
    return search


def raw_labels(art, out) -> np.ndarray:
    if art.index.config.backend == "pgvector":
        width = max((len(rows) for rows in out), default=0)
        return np.array([[r[0] for r in rows] + [-1] * (width - len(rows)) for rows in out], dtype=np.int64)
    if art.index.config.backend == "hnswlib":
        return np.asarray(out[0], dtype=np.int64)
    return np.asarray(out[1], dtype=np.int64)


def bench_index(name: str, args, queries: np.ndarray, truth_cache: dict) -> dict[str, Any]:
    art, build_s = C.artifact(name, args.n, args.dim, threads=args.threads)
    k = args.k
    big = name in ("faiss-flat", "pgvector-flat")  # brute force: ~100x slower per query, so fewer queries
    nb = min(args.batch, 100) if big else args.batch
    ns = min(args.single, 150) if big else args.single  # 150 x ~17 ms x 3 sides x 5 repeats: ~40 s
    qb, qs = queries[:nb], queries[:ns]
    key = len(queries)
    if key not in truth_cache:
        truth_cache[key] = C.ground_truth(art.vectors, art.labels, queries, k)
    truth = truth_cache[key]

    store = C.DictStore(art.labels)
    pipe = C.BenchPipeline(art, store)
    # Like for like: raw returns labels and scores; this returns, per query, a ranked row of labels,
    # scores and document ids (Hit objects are built when first read; timed apart below).
    chunk_stage = C.retrieve_stage(pipe, k=k, per_document=False, fetch_text=False)
    # What a default pipeline adds on top: chunk text read in the stage, and one chunk per document.
    text_stage = C.retrieve_stage(pipe, k=k, per_document=False, fetch_text=True)
    doc_stage = C.retrieve_stage(pipe, k=k, per_document=True, fetch_text=True)
    raw = raw_searcher(art, args.threads)

    # warm up: touch the index, the mmap'd vectors and the code paths
    raw(qb, k)
    C.run_stage(chunk_stage, qb, k)
    C.run_stage(text_stage, qb[:10], k)
    C.run_stage(doc_stage, qb[:10], k)

    rec: dict[str, list] = {m: [] for m in ("raw_batch", "rc_batch", "doc_batch", "text_batch", "hits_build", "batch_ratio",
                                            "raw_p50", "raw_p99", "rc_p50", "rc_p99", "single_diff", "noise_floor",
                                            "doc_p50", "text_p50")}
    raw_out = rc_states = None
    one_state = [C.new_states(qs[i : i + 1], k) for i in range(ns)]
    for rep in range(args.repeats):
        # Batch: raw and ragcost back to back, order alternating, so drifting load hits both alike;
        # the ratio is taken per pair of runs, then the median over repeats.
        times = {}
        for who in (("raw", "rc") if rep % 2 == 0 else ("rc", "raw")):
            if who == "raw":
                t0 = time.perf_counter()
                raw_out = raw(qb, k)
                times[who] = time.perf_counter() - t0
            else:
                rc_states = C.new_states(qb, k)
                usage = C.UsageRecord(stage="retrieve", resource="cpu", items=nb)
                t0 = time.perf_counter()
                chunk_stage.run(rc_states, usage)
                times[who] = time.perf_counter() - t0
        rec["raw_batch"].append(times["raw"])
        rec["rc_batch"].append(times["rc"])
        rec["batch_ratio"].append(times["raw"] / times["rc"])
        # Single queries, paired per query. The same query twice in a row would find its index
        # region in cache the second time, so each query is timed once per method per repeat, in
        # blocks of 50 queries (raw over the block, then ragcost over it, or the reverse), order
        # alternating by block: both sides see the same load drift and the same cold caches.
        # A second raw run ("raw_again") measures the method's own noise floor.
        raw_lat, rc_lat, raw2_lat = np.empty(ns), np.empty(ns), np.empty(ns)
        usage = C.UsageRecord(stage="retrieve", resource="cpu", items=1)
        for b, start in enumerate(range(0, ns, 50)):
            block = range(start, min(start + 50, ns))
            sides = ("raw", "rc", "raw_again")
            r = (b + rep) % 3  # rotates across blocks and across repeats (flat has one block of 50)
            for who in sides[r:] + sides[:r]:
                for i in block:
                    q = qs[i : i + 1]
                    if who == "rc":
                        t0 = time.perf_counter()
                        chunk_stage.run(one_state[i], usage)
                        rc_lat[i] = time.perf_counter() - t0
                    else:
                        t0 = time.perf_counter()
                        raw(q, k)
                        (raw_lat if who == "raw" else raw2_lat)[i] = time.perf_counter() - t0
        rec["noise_floor"].append(np.median(raw2_lat - raw_lat))
        rec["raw_p50"].append(np.percentile(raw_lat, 50))
        rec["raw_p99"].append(np.percentile(raw_lat, 99))
        rec["rc_p50"].append(np.percentile(rc_lat, 50))
        rec["rc_p99"].append(np.percentile(rc_lat, 99))
        rec["single_diff"].append(np.median(rc_lat - raw_lat))
        t0 = time.perf_counter()
        for s in rc_states:
            s.hits  # noqa: B018 - builds the Hit objects, as the first reader of the results does
        rec["hits_build"].append(time.perf_counter() - t0)
        text_states = C.new_states(qb, k)
        t0 = time.perf_counter()
        text_stage.run(text_states, C.UsageRecord(stage="retrieve", resource="cpu", items=nb))
        rec["text_batch"].append(time.perf_counter() - t0)
        rec["text_p50"].append(np.percentile(C.time_stage_each(text_stage, qs[: max(ns // 3, 1)], k)[0], 50))
        doc_states = C.new_states(qb, k)
        t0 = time.perf_counter()
        doc_stage.run(doc_states, C.UsageRecord(stage="retrieve", resource="cpu", items=nb))
        rec["doc_batch"].append(time.perf_counter() - t0)
        rec["doc_p50"].append(np.percentile(C.time_stage_each(doc_stage, qs[: max(ns // 3, 1)], k)[0], 50))

    med = {m: C.median(v) for m, v in rec.items()}
    r_raw = C.recall_at_k(raw_labels(art, raw_out), truth[:nb])
    r_rc = C.recall_at_k(C.hit_labels(rc_states, k), truth[:nb])
    same = bool(np.array_equal(np.sort(raw_labels(art, raw_out), axis=1), np.sort(C.hit_labels(rc_states, k), axis=1)))
    ratio = med["batch_ratio"]
    overhead_us = med["single_diff"] * 1e6
    allowed_us = max(0.1 * med["raw_p50"] * 1e6, 30.0)
    out: dict[str, Any] = {
        "index": C.INDEXES[name],
        "build_seconds": round(build_s, 1),
        "bytes_per_vector": art.manifest.bytes_per_vector,
        "batch_queries": nb,
        "single_queries": ns,
        "raw": {"batch_qps": round(nb / med["raw_batch"], 1), "p50_us": round(med["raw_p50"] * 1e6, 1),
                "p99_us": round(med["raw_p99"] * 1e6, 1), "recall_at_k": round(r_raw, 5)},
        "ragcost": {"batch_qps": round(nb / med["rc_batch"], 1), "p50_us": round(med["rc_p50"] * 1e6, 1),
                    "p99_us": round(med["rc_p99"] * 1e6, 1), "recall_at_k": round(r_rc, 5)},
        "ragcost_with_text": {"batch_qps": round(nb / med["text_batch"], 1), "p50_us": round(med["text_p50"] * 1e6, 1),
                              "note": "fetch_text: true (the default): chunk rows read from the in-memory store in the stage"},
        "ragcost_per_document": {"batch_qps": round(nb / med["doc_batch"], 1), "p50_us": round(med["doc_p50"] * 1e6, 1),
                                 "note": "the default stage: k best documents (one chunk each, from 4k chunks), with text"},
        "hits_build_us_per_query": round(med["hits_build"] / nb * 1e6, 2),
        "batch_qps_ratio": round(ratio, 4),
        "single_overhead_us": round(overhead_us, 1),
        "single_overhead_frac": round(overhead_us / (med["raw_p50"] * 1e6), 4),
        "single_overhead_allowed_us": round(allowed_us, 1),
        "single_noise_floor_us": round(med["noise_floor"] * 1e6, 1),
        "recall_diff": round(abs(r_rc - r_raw), 6),
        "same_labels_as_raw": same,
        "pass": {
            "batch_qps_ratio_ge_0.95": ratio >= 0.95,
            "single_overhead_le_max_10pct_30us": overhead_us <= allowed_us,
            "recall_equal_within_1e-4": abs(r_rc - r_raw) <= 1e-4,
        },
    }
    if name == "faiss-ivf_pq":
        b = build_params(art.index.config)
        code_id = b.m * b.nbits / 8 + 8  # PQ code + int64 id per vector in the inverted lists
        out["ivf_pq_bytes"] = {
            "total_per_vector": art.manifest.bytes_per_vector,
            "code_plus_id_per_vector": code_id,
            "fixed_bytes_amortised_per_vector": round(art.manifest.bytes_per_vector - code_id, 2),
            # Computed, not measured: what the fixed part (coarse centroids at nlist="auto" plus the PQ
            # codebooks, both float32) adds per vector at larger collections.
            "total_per_vector_computed_at": {
                f"{n:,}": round(code_id + (auto_nlist(n) * args.dim * 4 + 2**b.nbits * args.dim * 4) / n, 2)
                for n in (args.n, 1_000_000, 10_000_000)  # at args.n it can be checked against the measured total
            },
            "pass_total_le_64": art.manifest.bytes_per_vector <= 64,
            "pass_code_plus_id_le_64": code_id <= 64,
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--batch", type=int, default=1000, help="queries per batch call")
    ap.add_argument("--single", type=int, default=1000, help="queries timed one by one (paired raw/ragcost per query)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="0 = all cores, for raw and ragcost alike")
    ap.add_argument("--indexes", default=",".join(C.LOCAL_INDEXES),
                    help="comma-separated names from bench.common.INDEXES (pgvector-flat, pgvector-hnsw: "
                         "eval \"$(scripts/start_pgvector.sh)\" first)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    queries, _ = C.synthetic_queries(max(args.batch, args.single), args.dim)
    truth_cache: dict = {}
    results = {name: bench_index(name, args, queries, truth_cache) for name in args.indexes.split(",")}
    result = {
        "benchmark": "overhead",
        "data": {"n": args.n, "dim": args.dim, "k": args.k, "kind": C.SYNTHETIC_NOTE},
        "method": {
            "raw": "the library's own search call on the same loaded index object, parameters set on the index once",
            "ragcost": "ragcost.stages.retrieve.Retrieve.run(per_document=False, fetch_text=False) on a real LoadedIndex: "
                       "ranked labels, scores and document ids per query; Hit objects are built on first read "
                       "(hits_build_us_per_query); store = in-memory dict (no DuckDB round trip)",
            "timing": f"{args.repeats} repeats. Batch: raw and ragcost back to back (order alternating); "
                      "batch_qps_ratio = median over repeats of raw time / ragcost time. Single: each query raw and "
                      "through ragcost once per repeat, in blocks of 50 queries with the order rotating by block; "
                      "single_overhead_us = median over repeats of the median per-query difference; "
                      "single_noise_floor_us = the same statistic for raw against a second raw run; "
                      "p50/p99 are medians over repeats",
            "threads": args.threads or "all cores",
        },
        "machine": C.machine(),
        "indexes": results,
        "pass": all(all(v for v in r["pass"].values()) for r in results.values()),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    C.emit(result)
    return result


if __name__ == "__main__":
    main()
