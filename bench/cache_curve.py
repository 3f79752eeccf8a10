"""The cache's candidate rule as a curve: paraphrase hit rate against near-miss false-hit rate, per threshold.

    python -m bench.cache_curve [--corpora quickstart,scifact] [--out bench/out/cache_curve.json]

For every labelled pair of bench/data/cache_pairs_tune.jsonl (the tuning half, generated from templates)
and bench/data/cache_pairs_test.jsonl (the test half, written by hand), the second question is looked up
against a cache holding the first alone, as the stage does it: misspelt words corrected to the corpus's
spelling (and the question embedded again when one changed), the cosine of the two questions' vectors
against ``min_similarity``, then the meaning check (:func:`ragcost.cache.meaning.compare` at the stage's
``max_differing_weight`` and ``min_word_similarity``). The basis check (a fresh retrieval) is left out: it can
only turn a hit into a miss, so these are the hits the check is offered, and a false hit here is one the
check would have to catch.

Per threshold and per half: the paraphrase hit rate (English paraphrases), the near-miss false-hit rate
(near-misses served), precision (right hits over hits), and the same with the meaning check off (similarity
alone), to show what the rules are worth. ``p_chr_auc`` is the area under precision against the hit rate of
every pair that should hit, over the thresholds (trapezoids, hit rate 0 to the largest reached): one number
per curve, 1 for a rule that is always right. The net value of a cache per 1,000 lookups of this mix is
``right hits x avoided - false hits x wrong_answer_usd``; with the avoided dollars of a hit as the unit it
depends only on ``R = wrong_answer_usd / avoided``. For several R the threshold that maximises it on the
tuning half is picked, and the test half is read at that threshold.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
HALVES = {"tune": REPO / "bench" / "data" / "cache_pairs_tune.jsonl", "test": REPO / "bench" / "data" / "cache_pairs_test.jsonl"}
GRID = [0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
RATIOS = [1, 10, 100, 1000]


def looked_up(corpus: str, pairs: list[dict]) -> list[dict]:
    """Each pair's similarity and meaning-check verdict, as the stage computes them at its defaults."""
    import numpy as np

    from bench.cache import indexed
    from ragcost.cache.meaning import compare
    from ragcost.cache.words import WordVectors
    from ragcost.stages.cache import MAX_DIFFERING_WEIGHT, MIN_WORD_SIMILARITY, _vocabulary

    pipe = indexed(corpus)
    pipe.embedder.warm_up()
    vocab = _vocabulary(pipe, pipe.artifact().manifest.fingerprint)
    words = WordVectors(pipe.embedder.embed)
    asked = [vocab.correct(p["b"])[0] for p in pairs]

    def unit(texts: list[str]) -> Any:
        v = np.asarray(pipe.embedder.embed_queries(texts), np.float32)[:, : pipe.dim]
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    a, b = unit([p["a"] for p in pairs]), unit(asked)
    out = []
    for p, text, va, vb in zip(pairs, asked, a, b):
        d = compare(p["a"], text, vocab, MAX_DIFFERING_WEIGHT, words.similar, MIN_WORD_SIMILARITY)
        out.append({**p, "asked": text, "similarity": float(va @ vb), "same": d.same, "rule": d.family})
    pipe.close()
    return out


def point(rows: list[dict], floor: float, rules: bool) -> dict[str, Any]:
    para = [r for r in rows if r["class"] == "paraphrase"]
    near = [r for r in rows if r["class"] == "near-miss"]

    def hit(r: dict) -> bool:
        return r["similarity"] >= floor and (r["same"] or not rules)

    right, wrong = sum(hit(r) for r in para), sum(hit(r) for r in near)
    return {"min_similarity": floor, "paraphrase_hits": right, "paraphrases": len(para),
            "paraphrase_hit_rate": round(right / len(para), 4) if para else None,
            "near_miss_served": wrong, "near_misses": len(near),
            "false_hit_rate": round(wrong / len(near), 4) if near else None,
            "precision": round(right / (right + wrong), 4) if right + wrong else None}


def auc(points: list[dict]) -> Optional[float]:
    """Area under precision against hit rate (trapezoids; a threshold with no hit has no precision)."""
    xs = sorted((p["paraphrase_hit_rate"], p["precision"]) for p in points if p["precision"] is not None)
    if not xs:
        return None
    area, (x0, y0) = xs[0][0] * xs[0][1], xs[0]  # from hit rate 0 at the first point's precision
    for x, y in xs[1:]:
        area += (x - x0) * (y + y0) / 2
        x0, y0 = x, y
    return round(area, 4)


def curve(rows: list[dict]) -> dict[str, Any]:
    with_rules = [point(rows, f, True) for f in GRID]
    alone = [point(rows, f, False) for f in GRID]
    return {"meaning_check": with_rules, "similarity_alone": alone,
            "p_chr_auc": {"meaning_check": auc(with_rules), "similarity_alone": auc(alone)}}


def best(points: list[dict], ratio: float) -> dict[str, Any]:
    """The threshold with the largest net per 1,000 lookups (avoided dollars per hit as the unit); ties: the higher."""
    def net(p: dict) -> float:
        n = p["paraphrases"] + p["near_misses"]
        return 1000 * (p["paraphrase_hits"] - ratio * p["near_miss_served"]) / n

    top = max(points, key=lambda p: (round(net(p), 9), p["min_similarity"]))
    return {"wrong_answer_over_avoided": ratio, "min_similarity": top["min_similarity"], "net_per_1000": round(net(top), 2)}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", default="quickstart,scifact")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from ragcost.stages.cache import MIN_SIMILARITY

    rows: dict[str, list[dict]] = {h: [] for h in HALVES}
    for half, path in HALVES.items():
        pairs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for corpus in args.corpora.split(","):
            mine = [p for p in pairs if p["corpus"] == corpus]
            if mine:
                rows[half] += looked_up(corpus, mine)
    out: dict[str, Any] = {"default_min_similarity": MIN_SIMILARITY, "halves": {h: str(p.relative_to(REPO)) for h, p in HALVES.items()},
                           "curves": {h: curve(rs) for h, rs in rows.items()}}
    picks = []
    for ratio in RATIOS:
        pick = best(out["curves"]["tune"]["meaning_check"], ratio)
        at = next(p for p in out["curves"]["test"]["meaning_check"] if p["min_similarity"] == pick["min_similarity"])
        picks.append({**pick, "test_at_pick": at, "test_net_per_1000": best([at], ratio)["net_per_1000"]})
    out["picks"] = picks
    out["at_default"] = {h: next(p for p in out["curves"][h]["meaning_check"] if p["min_similarity"] == MIN_SIMILARITY)
                         for h in HALVES}
    out["near_misses_offered_at_default"] = {h: [{"family": r["family"], "a": r["a"], "b": r["b"], "similarity": round(r["similarity"], 3),
                                     "rule": r["rule"]} for r in rs
                                    if r["class"] == "near-miss" and r["similarity"] >= MIN_SIMILARITY and r["same"]]
                                for h, rs in rows.items()}
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
