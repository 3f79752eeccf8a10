"""eval's $ per query against `ragcost query`'s, for the quickstart pipeline one query at a time (issue 40, item 2).

    python -m bench.eval_served [--pairs 5] [--queries 40]

The same questions both ways, in ``--pairs`` pairs a few seconds apart (a slow spell of a shared machine moves
both sides of a pair, or one pair), the median pair's ratio reported:

- eval: ``ragcost eval`` (the Python API) of a spec over the quickstart pipeline's own index file, its
  dataset a BEIR folder made here from the corpus the pipeline indexes (``pydoc_data.topics``, one document a
  topic) and the first ``--queries`` hand-written questions of ``eval/useful/quickstart-on-topic.jsonl``
  (their topics as qrels), at eval's default traffic (one at a time at the book's declared rate). Its query
  CPU is measured afresh for every pair (the cached measurement is dropped first).
- query time: ``ragcost query pipelines/quickstart.yaml --queries FILE --batch-size 1 --json`` (a child
  process) over the same questions: ``total_usd`` / queries. Both sides pay a ledger write per query, as a
  served pipeline does (eval writes each batch's rows to a scratch ledger inside its overhead claim; before
  issue 41 it priced none and query time ran with ``--no-ledger`` here).

Target: eval ÷ query time within 15% (``pass.within_15pct``). Needs the quickstart index
(``ragcost index pipelines/quickstart.yaml`` from the repo root; run here when missing) and embeds the topics
once into the eval cache (``--cache-dir``, default ``.ragcost/eval``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "pipelines" / "quickstart.yaml"
QUESTIONS = ROOT / "eval" / "useful" / "quickstart-on-topic.jsonl"
TARGET = 0.15


def make_dataset(folder: Path, n: int) -> tuple[Path, Path]:
    """A BEIR folder of the quickstart corpus and ``n`` judged questions; and the same questions for `ragcost query`."""
    from pydoc_data.topics import topics

    data = folder / "pydoc-topics"
    data.mkdir(parents=True, exist_ok=True)
    with (data / "corpus.jsonl").open("w") as f:
        for key in sorted(topics):
            f.write(json.dumps({"_id": key, "title": key, "text": topics[key]}) + "\n")
    rows = [json.loads(x) for x in QUESTIONS.read_text().splitlines() if x.strip()][:n]
    with (data / "queries.jsonl").open("w") as f, (data / "qrels.tsv").open("w") as g, (folder / "questions.jsonl").open("w") as h:
        g.write("query-id\tcorpus-id\tscore\n")
        for r in rows:
            f.write(json.dumps({"_id": r["_id"], "text": r["text"]}) + "\n")
            h.write(json.dumps({"_id": r["_id"], "text": r["text"]}) + "\n")
            for t in r["topics"]:
                if t in topics:
                    g.write(f"{r['_id']}\t{t}\t1\n")
    return data, folder / "questions.jsonl"


def write_spec(folder: Path, data: Path) -> Path:
    spec = folder / "spec.yaml"
    spec.write_text(f"pipeline: {QUICKSTART}\ndataset: {data}\nk: [5]\ngrid:\n  - index: {ROOT / 'indexes' / 'hnsw-m16.yaml'}\n")
    return spec


def eval_side(spec: Path, cache: Path) -> dict[str, Any]:
    from ragcost.evaluate.run import run_eval
    from ragcost.evaluate.spec import load_spec

    for p in cache.glob("pydoc-topics-*.query-cpu.json"):
        p.unlink()  # measured afresh for every pair
    run = run_eval(load_spec(spec), cache)
    r = run.ok()[0]
    return {"usd_per_query": r.total_usd / r.queries, "path": r.path, "traffic": run.traffic["label"],
            "stages": {s["stage"]: s["usd"] / r.queries for s in r.stages}, "p50_ms": r.p50_ms, "p95_ms": r.p95_ms,
            "warnings": r.warnings}


def query_side(questions: Path, ledger_url: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "ragcost.cli.main", "query", str(QUICKSTART), "--queries", str(questions),
           "--batch-size", "1", "--json", "--ledger", ledger_url]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    res = json.loads(proc.stdout)
    n = len(res["queries"])
    lat = sorted(q["latency_ms"] for q in res["queries"])
    return {"usd_per_query": res["total_usd"] / n, "stages": {s["stage"]: s["usd"] / n for s in res["stages"]},
            "storage_usd_per_query": res["storage_usd"] / n, "p50_ms": statistics.median(lat)}


def ensure_index() -> None:
    proc = subprocess.run([sys.executable, "-m", "ragcost.cli.main", "index", str(QUICKSTART)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"ragcost index {QUICKSTART} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--cache-dir", type=Path, default=ROOT / ".ragcost" / "eval")
    args = ap.parse_args(argv)
    ensure_index()
    with tempfile.TemporaryDirectory() as tmp:
        data, questions = make_dataset(Path(tmp), args.queries)
        spec = write_spec(Path(tmp), data)
        pairs = []
        for _ in range(args.pairs):
            ev = eval_side(spec, args.cache_dir)
            q = query_side(questions, f"duckdb:///{Path(tmp) / 'ledger.duckdb'}")  # a ledger of its own, DuckDB as eval's
            pairs.append({"ratio": ev["usd_per_query"] / q["usd_per_query"], "eval": ev, "query": q})
    pairs.sort(key=lambda p: p["ratio"])
    mid = pairs[len(pairs) // 2]
    out = {
        "benchmark": "eval_served", "queries": args.queries, "pairs": len(pairs), "ledger": "both sides write one",
        "ratio_eval_over_query": round(mid["ratio"], 4), "ratios": [round(p["ratio"], 4) for p in pairs],
        "eval_usd_per_query": mid["eval"]["usd_per_query"], "query_usd_per_query": mid["query"]["usd_per_query"],
        "eval_path": mid["eval"]["path"], "eval_traffic": mid["eval"]["traffic"], "eval_warnings": mid["eval"]["warnings"],
        "eval_stages_usd_per_query": mid["eval"]["stages"], "query_stages_usd_per_query": {**mid["query"]["stages"], "storage": mid["query"]["storage_usd_per_query"]},
        "eval_p50_ms": round(mid["eval"]["p50_ms"], 2), "query_p50_ms": round(mid["query"]["p50_ms"], 2),
        "load_average": round(os.getloadavg()[0], 2),
        "pass": {"within_15pct": abs(mid["ratio"] - 1) <= TARGET},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
