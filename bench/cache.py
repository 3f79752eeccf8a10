"""Replay the labelled cache workload through the demo chain, cached, and count false hits by the labels.

    python -m bench.cache [--corpora quickstart,scifact] [--out result.json] [--details DIR]
    python -m bench.cache --calibrate      # choose min_similarity, max_differing_weight, min_word_similarity on the calibration half

The workload is bench/data/cache_labelled.jsonl (``python -m bench.cache_labels`` writes it; see
there for how each row was made). Each corpus is indexed once into a bench folder and replayed,
one query at a time as a service sees them, through retrieve k=20 -> rerank (exact rescore, top 5)
-> extractive generate, with an empty cache at the stage's defaults in front. A served answer is a
**false hit** when the question that made the entry is not the same question as the one asked:
their ``group`` labels (or tenants) differ. Retrieval overlap plays no part in the judgement.

Reported per corpus and split (calibration: the defaults were chosen on it; holdout: never seen),
per class and family: hit rate, hits by tier, false hits; overall: semantic hits, false hits and
the Wilson 95% upper bound on the false-hit rate; near-miss pairs served (each must miss). Then
bench/data/cache_heldout.jsonl (hand pairs written before the synonym rule was tuned: synonym,
reorder and request-form paraphrases; negation, number, operator, identifier, antonym and order
near-misses) is replayed the same way, every pair's first question first, and reported per family.

``--calibrate`` needs no replay: it embeds every query, takes for each the cached questions a
replay would hold before it (every earlier query of its corpus and tenant), and applies the
stage's own candidate rule (:func:`ragcost.cache.meaning.compare` over the most similar ones
above the floor) at each grid point, on calibration rows only; the pick is the point with the most
paraphrase hits and no false hit, and its holdout figures are printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # one query at a time on a shared machine
REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "bench" / "data" / "cache_labelled.jsonl"
FOLDER = Path(os.environ.get("RAGCOST_BENCH_CACHE", Path.home() / ".cache" / "ragcost-bench")) / "cache-labelled"
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
TARGETS = {"false_hits_max": 0, "false_hit_upper95_max": 0.01, "semantic_hits_min": 300, "paraphrase_hit_rate_min": 0.5,
           "near_miss_served_max": 0}
GRID_WEIGHT = [0.7, 1.0, 1.5, 2.0, 3.0, 1e9]  # log(1 + N/df) >= 0.69: below 0.7 only stopwords may differ
GRID_SIM = [0.5, 0.6, 0.7, 0.8, 0.9]
HELDOUT = REPO / "bench" / "data" / "cache_heldout.jsonl"  # hand pairs written before the synonym rule was tuned
GRID_WORD = [2.0, 0.9, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5]  # 2.0: no synonyms


def source_of(corpus: str) -> dict[str, Any]:
    if corpus == "quickstart":
        return {"source": {"reader": "pydoc-topics"}, "chunking": {"size": 200, "overlap": 32, "unit": "tokens"}}
    return {"source": {"path": str(SCIFACT), "reader": "beir"}, "chunking": {"size": 254, "overlap": 32, "unit": "tokens"}}


def write_pipeline(corpus: str, cached: bool, cache_params: Optional[dict] = None, cache_file: str = "cache") -> Path:
    folder = FOLDER / corpus
    folder.mkdir(parents=True, exist_ok=True)
    stages: list[dict[str, Any]] = [{"type": "retrieve", "k": 20}, {"type": "rerank", "backend": "rescore", "top_n": 5},
                                    {"type": "generate", "backend": "extractive", "sentences": 3}]
    if cached:
        stages = [{"type": "cache", "url": f"duckdb:///{folder / (cache_file + '.duckdb')}", **(cache_params or {})}, *stages,
                  {"type": "cache_write"}]
    cfg = {"name": corpus, "store": f"duckdb:///{folder / 'store.duckdb'}", "index_dir": str(folder / "index"),
           **source_of(corpus),
           "embed": {"type": "sentence-transformers", "model": "all-MiniLM-L6-v2", "precision": "float32", "batch_size": 32},
           "index": str(REPO / "indexes" / "hnsw-m16.yaml"), "pricing": str(REPO / "pricing" / "default.yaml"),
           "resource": "cpu", "stages": stages}
    p = folder / (f"{cache_file}d.yaml" if cached else "plain.yaml")
    p.write_text(json.dumps(cfg, indent=2))
    return p


def load_rows(corpora: list[str]) -> list[dict]:
    return [r for r in (json.loads(line) for line in WORKLOAD.read_text().splitlines() if line.strip()) if r["corpus"] in corpora]


def _seed_store(corpus: str) -> None:
    """SciFact's chunks and vectors from `ragcost eval`'s cache when it has them (same model and chunking):
    copied, never opened in place, so the bench does not embed 9,920 chunks again."""
    import shutil

    store = FOLDER / corpus / "store.duckdb"
    if corpus != "scifact" or store.exists():
        return
    found = sorted((REPO / ".ragcost" / "eval").glob("scifact-*-c254o32-align127-tevery_chunk.duckdb"))
    if found:
        store.parent.mkdir(parents=True, exist_ok=True)
        wal = Path(str(found[0]) + ".wal")
        shutil.copyfile(found[0], store)
        if wal.exists():  # an eval writing now: its log comes too, and DuckDB replays it on open
            shutil.copyfile(wal, Path(str(store) + ".wal"))


def indexed(corpus: str):
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline

    _seed_store(corpus)
    pipe = Pipeline.load(write_pipeline(corpus, False))
    run_index(pipe)
    return pipe


def replay(corpus: str, rows: list[dict], cache_params: Optional[dict] = None, cache_file: str = "cache") -> list[dict]:
    """Each query alone through the cached chain, from an empty cache of its own file (an engine the process
    still holds on a deleted file would keep its entries); what each was served and by whose entry."""
    from ragcost.runtime.pipeline import Pipeline
    from ragcost.records import QueryState

    for leftover in (FOLDER / corpus).glob(f"{cache_file}.duckdb*"):
        leftover.unlink()
    pipe = Pipeline.load(write_pipeline(corpus, True, cache_params, cache_file))
    pipe.warm_up()
    h = pipe.stage("cache").handle
    made_by: dict[str, dict] = {}  # entry id -> the row whose miss wrote it
    out = []
    for r in rows:
        s = QueryState(text=r["text"], id=r["id"], k=20, tenant=r["tenant"])
        before = set(h.entries)
        res = pipe.run([s])
        for new in set(h.entries) - before:
            made_by[new] = r
        walls = {c.record.stage: c.record.wall_seconds for c in res.calls}
        served = made_by.get(s.cache["entry"]) if s.cache else None
        out.append({**r, "cache": s.cache, "served_by": served and served["id"],
                    "false": bool(s.cache) and (served is None or served["group"] != r["group"] or served["tenant"] != r["tenant"]),
                    "refused": [x["family"] for x in (s.cache_trip or {}).get("refused", [])],
                    "hits": [{"doc_id": x.doc_id, "title": x.title} for x in s.hits[:2]],
                    "ms": (walls.get("cache", 0.0) if s.cache else sum(w for st, w in walls.items() if st != "embed")) * 1000,
                    "lookup_ms": walls.get("cache", 0.0) * 1000,
                    "uncached_ms": None if s.cache else sum(walls.values()) * 1000})
    pipe.close()
    return out


def summary(rows: list[dict]) -> dict[str, Any]:
    from ragcost.cache import wilson_upper
    from ragcost.cost.stats import percentiles

    by: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        by[(r["class"], r["family"])].append(r)
    families = {}
    for (cls, fam), rs in sorted(by.items()):
        hits = [r for r in rs if r["cache"]]
        families[f"{cls}/{fam}"] = {"queries": len(rs), "hits": len(hits), "hit_rate": round(len(hits) / len(rs), 4),
                                    "exact": sum(r["cache"]["tier"] == "exact" for r in hits),
                                    "semantic": sum(r["cache"]["tier"] == "semantic" for r in hits),
                                    "false_hits": sum(r["false"] for r in hits)}
    hits = [r for r in rows if r["cache"]]
    sem = [r for r in hits if r["cache"]["tier"] == "semantic"]
    wrong = sum(r["false"] for r in hits)
    para = [r for r in rows if r["class"] == "paraphrase"]
    near = [r for r in rows if r["class"] == "near-miss" and r["family"] != "tenant"]
    p50, p95 = percentiles([r["ms"] for r in hits], (50, 95))
    return {
        "queries": len(rows), "hits": len(hits), "semantic_hits": len(sem),
        "semantic_right": sum(not r["false"] for r in sem),
        "false_hits": wrong, "false_hit_upper95": round(wilson_upper(wrong, len(hits), 0.95), 4) if hits else None,
        "semantic_false_upper95": round(wilson_upper(sum(r["false"] for r in sem), len(sem), 0.95), 4) if sem else None,
        "paraphrase_hit_rate": round(sum(bool(r["cache"]) for r in para) / len(para), 4) if para else None,
        # a near-miss asked verbatim earlier as its own question hits that entry (same text, same group): not its pair's
        "near_miss_pairs": len(near), "near_miss_served": sum(bool(r["cache"]) and r["false"] for r in near),
        "near_miss_same_text_hits": sum(bool(r["cache"]) and not r["false"] for r in near),
        "near_miss_refused_by": dict(Counter(f for r in near for f in r["refused"][:1])),
        "hit_ms": {"p50": p50 and round(p50, 3), "p95": p95 and round(p95, 3)},
        **_lookup_share(rows),
        "families": families,
        "false_examples": [{"id": r["id"], "text": r["text"], "served_by": r["served_by"]} for r in hits if r["false"]][:10],
    }


def _lookup_share(rows: list[dict]) -> dict[str, Any]:
    """The cache stage's own time per query (hit or miss) against a whole uncached query's (every stage, the
    query's embedding included): the latency budget is a lookup p50 at most 10% of an uncached query's."""
    from ragcost.cost.stats import percentiles

    look = [r["lookup_ms"] for r in rows if r.get("lookup_ms") is not None]
    full = [r["uncached_ms"] for r in rows if r.get("uncached_ms") is not None]
    if not look or not full:
        return {}
    (lp50,), (up50,) = percentiles(look, (50,)), percentiles(full, (50,))
    return {"lookup_ms_p50": round(lp50, 3), "uncached_query_ms_p50": round(up50, 3),
            "lookup_share_of_uncached_p50": round(lp50 / up50, 4) if up50 else None}


def pair_rows(path: Path, corpora: list[str]) -> list[dict]:
    """A file of labelled pairs ({corpus, class, family, a, b}) as workload rows: every pair's first question
    is asked (and cached) first, in a tenant of its own, then its second; a paraphrase (or translation) is
    right only when served its own pair's answer, a near-miss must miss. A tenant per pair means each pair
    meets a cache holding its own first question alone (the other pairs cannot serve it)."""
    pairs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    firsts, seconds = [], []
    for i, p in enumerate(pairs):
        if p["corpus"] not in corpora:
            continue
        a = {"id": f"p{i}a", "corpus": p["corpus"], "class": "novel", "family": "first", "text": p["a"], "tenant": f"p{i}",
             "group": f"p{i}a", "after": None, "source": p.get("source", "hand"), "split": path.stem}
        b = {**a, "id": f"p{i}b", "class": p["class"], "family": p["family"], "text": p["b"], "after": a["id"],
             "group": a["group"] if p["class"] in ("paraphrase", "cross-language") else f"p{i}b"}
        firsts.append(a)
        seconds.append(b)
    return firsts + seconds


def run_pairs(files: list[Path], corpora: list[str], params: Optional[dict], details: Optional[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {"chain": "retrieve k=20 -> rerank rescore top 5 -> extractive", "cache_params": params or "defaults",
                           "files": {}}
    for f in files:
        got_all = []
        res = {}
        for corpus in corpora:
            rows = pair_rows(f, [corpus])
            if not rows:
                continue
            indexed(corpus).close()
            got = replay(corpus, rows, params, cache_file="cache-pairs")
            got_all += got
            res[corpus] = summary([r for r in got if r["after"]])
            if details:
                details.mkdir(parents=True, exist_ok=True)
                (details / f"{f.stem}-{corpus}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in got))
        res["all"] = summary([r for r in got_all if r["after"]])
        res["all"]["lookup"] = _lookup_share(got_all)
        out["files"][str(f.relative_to(REPO)) if f.is_relative_to(REPO) else str(f)] = res
    return out


def run_bench(corpora: list[str], details: Optional[Path]) -> dict[str, Any]:
    import time

    t0, c0 = time.perf_counter(), time.process_time()
    rows = load_rows(corpora)
    out: dict[str, Any] = {"workload": str(WORKLOAD.relative_to(REPO)), "chain": "retrieve k=20 -> rerank rescore top 5 -> extractive",
                           "corpora": {}}
    everything = []
    for corpus in corpora:
        indexed(corpus).close()
        got = replay(corpus, [r for r in rows if r["corpus"] == corpus])
        everything += got
        out["corpora"][corpus] = {split: summary([r for r in got if r["split"] == split]) for split in ("calibration", "holdout")}
        out["corpora"][corpus]["all"] = summary(got)
        if details:
            details.mkdir(parents=True, exist_ok=True)
            (details / f"{corpus}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in got))
    out["heldout_file"] = {}  # the hand pairs written before the synonym rule was tuned, replayed the same way
    for corpus in corpora:
        got = replay(corpus, heldout_rows([corpus]), cache_file="cache-heldout")
        seconds = [r for r in got if r["after"]]
        out["heldout_file"][corpus] = summary(seconds)
        if details:
            (details / f"{corpus}-heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in got))
    out["all"] = summary(everything)
    out["run"] = {"wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
                  "load_average": [round(x, 2) for x in os.getloadavg()]}
    out["holdout"] = summary([r for r in everything if r["split"] == "holdout"])
    a = out["all"]
    out["targets"] = TARGETS
    out["pass"] = {"false_hits": a["false_hits"] <= TARGETS["false_hits_max"],
                   "semantic_hits": a["semantic_right"] >= TARGETS["semantic_hits_min"],
                   "false_hit_upper95": a["semantic_false_upper95"] is not None and a["semantic_false_upper95"] <= TARGETS["false_hit_upper95_max"],
                   "paraphrase_hit_rate": (a["paraphrase_hit_rate"] or 0) >= TARGETS["paraphrase_hit_rate_min"],
                   "near_miss_all_miss": a["near_miss_served"] <= TARGETS["near_miss_served_max"]}
    return out


# ---- calibration -------------------------------------------------------------------------------

def candidates(corpus: str, rows: list[dict], top: int = 5) -> list[dict]:
    """Per query: the ``top`` most similar earlier queries of its corpus and tenant, with their similarity."""
    import numpy as np

    from ragcost.stages.cache import _vocabulary

    pipe = indexed(corpus)  # the pipeline is the stages' context: embedder, store, index
    pipe.embedder.warm_up()
    vecs = np.asarray(pipe.embedder.embed([r["text"] for r in rows]), np.float32)[:, : pipe.dim]
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    vocab = _vocabulary(pipe, pipe.artifact().manifest.fingerprint)
    from ragcost.cache.words import WordVectors

    words = WordVectors(pipe.embedder.embed)
    pipe.close()
    out = []
    for i, r in enumerate(rows):
        earlier = [j for j in range(i) if rows[j]["tenant"] == r["tenant"]]
        if not earlier:
            out.append({**r, "cands": [], "vocab": vocab, "words": words})
            continue
        sims = vecs[earlier] @ vecs[i]
        order = np.argsort(-sims)[:top]
        out.append({**r, "cands": [(rows[earlier[k]], float(sims[k])) for k in order], "vocab": vocab, "words": words})
    return out


def simulate(cands: list[dict], min_sim: float, max_weight: float, min_word: float = 2.0) -> dict[str, Any]:
    """The stage's candidate rule at one grid point (an exact-text repeat hits regardless)."""
    from ragcost.cache.meaning import compare
    from ragcost.cache.normalise import Normaliser

    norm = Normaliser()
    hits = wrong = para_hit = para = near_served = hand = hand_hit = 0
    for r in cands:
        para += r["class"] == "paraphrase"
        hand += r["class"] == "paraphrase" and r["family"] == "hand"
        served = None
        exact = next((c for c, _ in r["cands"] if norm(c["text"]) == norm(r["text"])), None)
        if exact is not None:
            served = exact
        else:
            for n, (c, sim) in enumerate(r["cands"]):
                if sim < min_sim:
                    break
                if compare(c["text"], r["text"], r["vocab"], max_weight, r["words"].similar, min_word).same:
                    served = c
                    break
        if served is None:
            continue
        hits += 1
        bad = served["group"] != r["group"] or served["tenant"] != r["tenant"]
        wrong += bad
        para_hit += r["class"] == "paraphrase" and not bad
        hand_hit += r["class"] == "paraphrase" and r["family"] == "hand" and not bad
        near_served += r["class"] == "near-miss" and r["family"] != "tenant"
    return {"min_similarity": min_sim, "max_differing_weight": max_weight, "min_word_similarity": min_word, "hits": hits,
            "false_hits": wrong, "paraphrase_hit_rate": round(para_hit / para, 4) if para else None,
            "hand_paraphrase_hit_rate": round(hand_hit / hand, 4) if hand else None, "near_miss_served": near_served}


def heldout_rows(corpora: list[str]) -> list[dict]:
    """bench/data/cache_heldout.jsonl as workload rows: every pair's first question is asked (and cached)
    first, then every second one; a paraphrase is right only when served its own pair's answer."""
    pairs = [json.loads(line) for line in HELDOUT.read_text().splitlines() if line.strip()]
    firsts, seconds = [], []
    for i, p in enumerate(pairs):
        if p["corpus"] not in corpora:
            continue
        a = {"id": f"ho-{i}a", "corpus": p["corpus"], "class": "novel", "family": "hand", "text": p["a"], "tenant": "a",
             "group": f"ho-{i}a", "after": None, "source": "hand", "split": "heldout"}
        b = {**a, "id": f"ho-{i}b", "class": p["class"], "family": p["family"], "text": p["b"], "after": a["id"],
             "group": a["group"] if p["class"] == "paraphrase" else f"ho-{i}b"}
        firsts.append(a)
        seconds.append(b)
    same: dict[str, str] = {}  # one text, one meaning: a question asked by two pairs shares a group
    for r in firsts:
        r["group"] = same.setdefault(r["text"], r["group"])
    for r in seconds:
        if r["class"] == "paraphrase":
            r["group"] = next(f["group"] for f in firsts if f["id"] == r["after"])
    return firsts + seconds


def by_family(cands: list[dict], min_sim: float, max_weight: float, min_word: float) -> dict[str, Any]:
    """The candidate rule's hit rate per class/family (each second question of a held-out pair)."""
    out = {}
    for key in sorted({(r["class"], r["family"]) for r in cands if r["after"]}):
        sel = [r for r in cands if (r["class"], r["family"]) == key and r["after"]]
        g = simulate(sel, min_sim, max_weight, min_word)
        out["/".join(key)] = {"pairs": len(sel), "hits": g["hits"], "false_hits": g["false_hits"]}
    return out


def calibrate(corpora: list[str]) -> dict[str, Any]:
    rows = load_rows(corpora)
    cands, held = [], []
    for corpus in corpora:
        cands += candidates(corpus, [r for r in rows if r["corpus"] == corpus])
        held += candidates(corpus, [r for r in heldout_rows([corpus])])
    calib = [r for r in cands if r["split"] == "calibration"]
    hold = [r for r in cands if r["split"] == "holdout"]
    grid = [simulate(calib, s, w, v) for s in GRID_SIM for w in GRID_WEIGHT for v in GRID_WORD]
    safe = [g for g in grid if g["false_hits"] == 0]
    # the most paraphrase hits; among ties the higher floor, then the most the words may differ (the larger
    # weight, the lower synonym floor): the calibration half's hand paraphrases rarely swap one word for one
    pick = max(safe, key=lambda g: (g["paraphrase_hit_rate"] or 0, g["min_similarity"], g["max_differing_weight"],
                                    -g["min_word_similarity"])) if safe else None
    at = (pick["min_similarity"], pick["max_differing_weight"], pick["min_word_similarity"]) if pick else None
    return {"calibration_grid": grid, "pick": pick,
            "holdout_at_pick": simulate(hold, *at) if pick else None,
            "heldout_file_at_pick": by_family(held, *at) if pick else None,
            "heldout_file_without_synonyms": by_family(held, at[0], at[1], 2.0) if pick else None,
            "note": "candidate rule only (no basis check, no learner): the replay's figures are the claim"}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", default="quickstart,scifact")
    ap.add_argument("--out")
    ap.add_argument("--details", help="a folder: each query's result, per corpus")
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--pairs", help="comma-separated pair files ({corpus, class, family, a, b} a line) to replay instead")
    ap.add_argument("--params", help="cache stage params as JSON (default: the stage's defaults)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    corpora = args.corpora.split(",")
    details = Path(args.details) if args.details else None
    if args.pairs:
        out = run_pairs([Path(p).resolve() for p in args.pairs.split(",")], corpora,
                        json.loads(args.params) if args.params else None, details)
    else:
        out = calibrate(corpora) if args.calibrate else run_bench(corpora, details)
    text = json.dumps(out, indent=2, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
