"""How well can a question's own signals tell its useful-document count? (issue 41, item 1; a measurement, not a model)

    python -m bench.useful_features [--dataset scifact --dataset cranfield] [--seeds 6] [--embed '{"dtype": "bfloat16"}']

For each dataset: ``ragcost eval`` of its committed pipeline (``pipelines/NAME.yaml``) on a flat index at its native
dimension gives every judged question's top 10 documents, their scores and the qrels' verdicts. Then, for each
seed, a logistic P(relevant) per document is fit on a seeded half of the questions and summed per question on the
other half, with three feature sets:

- ``now``: what the expected-useful judge uses (the score, the gap to the question's top score, log rank);
- ``question``: + the question's score distribution (its top score, top minus 10th, the document's z-score and its
  margin over the 10th);
- ``bm25``: + agreement with a keyword ranking (bm25s over the corpus, English stopwords: the document's BM25 rank
  and score ÷ BM25's top score, whether it is in BM25's top 10, the overlap of the two top-10 lists, BM25's top
  score).

Printed per set and seed: the predicted total ÷ the qrels count, the per-question correlation of predicted and
true counts, and the mean predicted count of questions with no relevant document in their top 10. The issue's
targets (``targets``): correlation >= 0.6 and <= 0.3 credited on every seed, total within 10%.
Embeds each corpus once into the eval cache (``--cache-dir``; minutes for SciFact on 2 cores).
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SETS = {
    "now": ["score", "gap", "log_rank"],
    "question": ["score", "gap", "log_rank", "top", "spread", "z", "above_last"],
    "bm25": ["score", "gap", "log_rank", "top", "spread", "z", "above_last", "b_logrank", "b_rel", "b_in10", "overlap", "b_top"],
}
TARGETS = {"corr_min": 0.6, "zero_credit_max": 0.3, "total_within": 0.10}


def judged(dataset: Path, pipeline: Path, cache: Path, embed: dict[str, Any] | None) -> list[tuple[str, list[str], np.ndarray, np.ndarray]]:
    """(question id, top-10 document ids, their scores, their qrels verdicts) of every judged question."""
    import ragcost.evaluate.expected as expected
    from ragcost.evaluate.run import run_eval
    from ragcost.evaluate.spec import load_spec

    docs: dict[str, list[str]] = {}
    real = expected.judged_queries

    def keep(qids, ranked, scores, qrels, k):  # the ranked ids judged_queries reads, kept for the BM25 features
        docs.update({q: [d for d in ranked.get(q, [])[:k] if d in scores.get(q, {})] for q in qids})
        return real(qids, ranked, scores, qrels, k)

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.yaml"
        body = {"pipeline": str(pipeline), "dataset": str(dataset), "k": [10], "grid": [{"index": str(ROOT / "indexes" / "flat.yaml")}]}
        if embed:
            body["embedders"] = [embed]
        spec.write_text(json.dumps(body))
        expected.judged_queries = keep
        try:
            r = run_eval(load_spec(spec), cache, traffic="64").ok()[0]
        finally:
            expected.judged_queries = real
    return [(j.qid, docs[j.qid], j.X[:, 0].copy(), j.y.copy()) for j in r.judged]


def _read_jsonl(path: Path) -> list[dict]:
    gz = path.with_name(path.name + ".gz")
    f = gzip.open(gz, "rt", encoding="utf-8") if not path.exists() and gz.exists() else path.open(encoding="utf-8")
    with f:
        return [json.loads(x) for x in f if x.strip()]


def bm25_features(dataset: Path, rows: list) -> list[dict]:
    """Per question: each top-10 document's BM25 (rank, score) and the question's BM25 top score and top-10 overlap."""
    import bm25s

    corpus = _read_jsonl(dataset / "corpus.jsonl")
    ids = [str(d["_id"]) for d in corpus]
    texts = {str(q["_id"]): q["text"] for q in _read_jsonl(dataset / "queries.jsonl")}
    ret = bm25s.BM25()
    ret.index(bm25s.tokenize([f"{d.get('title', '')} {d.get('text', '')}" for d in corpus], stopwords="en", show_progress=False),
              show_progress=False)
    out = []
    for qid, dl, _, _ in rows:
        res, sc = ret.retrieve(bm25s.tokenize([texts[qid]], stopwords="en", show_progress=False), k=min(100, len(ids)),
                               show_progress=False)
        got = {ids[i]: (r + 1, float(v)) for r, (i, v) in enumerate(zip(res[0], sc[0]))}
        top10 = {ids[i] for i in res[0][:10]}
        out.append({"bm": got, "top": float(sc[0][0]) if len(sc[0]) else 0.0, "overlap": len(set(dl) & top10) / 10})
    return out


def features(row, bm: dict, names: list[str]) -> np.ndarray:
    _, dl, s, _ = row
    n = len(s)
    if n == 0:
        return np.zeros((0, len(names)))
    rank = np.arange(1, n + 1.0)
    brank = np.array([bm["bm"].get(d, (101, 0.0))[0] for d in dl], float)
    bsc = np.array([bm["bm"].get(d, (101, 0.0))[1] for d in dl], float)
    cols = {"score": s, "gap": s.max() - s, "log_rank": np.log(rank), "top": np.full(n, s.max()),
            "spread": np.full(n, s.max() - s.min()), "above_last": s - s.min(), "z": (s - s.mean()) / (s.std() + 1e-6),
            "b_logrank": np.log(brank), "b_rel": bsc / (bm["top"] + 1e-9), "b_in10": (brank <= 10).astype(float),
            "overlap": np.full(n, bm["overlap"]), "b_top": np.full(n, bm["top"])}
    return np.column_stack([cols[c] for c in names])


def split_scores(rows: list, bms: list[dict], names: list[str], seed: int) -> dict[str, float]:
    from sklearn.linear_model import LogisticRegression

    idx = np.random.default_rng(seed).permutation(len(rows))
    half = len(rows) // 2
    fit, test = idx[:half], idx[half:]
    X = np.vstack([features(rows[i], bms[i], names) for i in fit])
    y = np.concatenate([rows[i][3] for i in fit])
    mu, sd = X.mean(axis=0), X.std(axis=0) + 1e-9
    lr = LogisticRegression(C=1.0, max_iter=3000).fit((X - mu) / sd, y)
    pred = np.array([lr.predict_proba((features(rows[i], bms[i], names) - mu) / sd)[:, 1].sum() if len(rows[i][2]) else 0.0
                     for i in test])
    true = np.array([rows[i][3].sum() for i in test])
    return {"total_ratio": round(float(pred.sum() / max(true.sum(), 1e-9)), 4),
            "corr": round(float(np.corrcoef(pred, true)[0, 1]), 4) if pred.std() > 0 and true.std() > 0 else None,
            "zero_credit": round(float(pred[true == 0].mean()), 4) if (true == 0).any() else None,
            "zero_share": round(float((true == 0).mean()), 4)}


def run(dataset: Path, pipeline: Path, cache: Path, seeds: int, embed: dict | None) -> dict[str, Any]:
    rows = judged(dataset, pipeline, cache, embed)
    bms = bm25_features(dataset, rows)
    out: dict[str, Any] = {"questions": len(rows)}
    for name, names in SETS.items():
        per = [split_scores(rows, bms, names, s) for s in range(seeds)]
        ok = all((p["corr"] or 0) >= TARGETS["corr_min"] and (p["zero_credit"] or 0) <= TARGETS["zero_credit_max"]
                 and abs(p["total_ratio"] - 1) <= TARGETS["total_within"] for p in per)
        out[name] = {"features": names, "seeds": per, "meets_targets": ok}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", action="append", help="a name under --data (default: scifact and cranfield)")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--pipeline", type=Path, help="the pipeline to evaluate (default: pipelines/NAME.yaml)")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--embed", type=json.loads, default=None, help='an embedder for the spec, e.g. \'{"dtype": "bfloat16"}\'')
    ap.add_argument("--cache-dir", type=Path, default=ROOT / ".ragcost" / "eval")
    args = ap.parse_args(argv)
    result: dict[str, Any] = {"benchmark": "useful_features", "targets": TARGETS, "datasets": {}}
    for name in args.dataset or ["scifact", "cranfield"]:
        pipeline = args.pipeline or ROOT / "pipelines" / f"{name}.yaml"
        result["datasets"][name] = run(args.data / name, pipeline, args.cache_dir, args.seeds, args.embed)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
