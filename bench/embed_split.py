"""How should a batch embed's CPU be split over its queries? (issue 24, build item 2)

    python -m bench.embed_split [--repeats 5] [--batches 12] [--batch-size 16]

The world: each query's embed CPU **alone** (a one-query call, median over ``--repeats``), scaled so
a batch's queries add up to the batch's measured CPU. A share model is right when a query's charged
share of the batch is its share of the alone figures. Candidates, from what the stage knows:

- ``even``: 1/n (the batch average, as before);
- ``tokens``: the query's tokens / the batch's tokens;
- ``tokens+c``: (tokens + c) / sum(tokens + c), ``c`` the per-call fixed cost in token-equivalents,
  fitted here on the alone figures (a + b * tokens; c = a / b): in-sample, the best this model does;
- ``charged``: what ragcost's ledger rows charge (the embedder's ``split_fixed_tokens``, fitted on an
  earlier run: out of sample).

Queries: the 20 demo questions, 30 SciFact claims and 30 Cranfield questions (real lengths, 6 to
60-odd tokens), mixed at random into ``--batches`` batches. The error of a model on a batch is
sum |share - true share| / 2 (the fraction of the batch's CPU charged to the wrong queries); the
printed figure is its mean over the batches. The CPU is per-thread (``ragcost.runtime.cpu``), the
embedder is the one ``bench.cost_attribution`` builds (the packaged MiniLM, sentence-transformers).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
from pathlib import Path

DATA = Path(os.environ.get("RAGCOST_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


def queries() -> list[str]:
    here = Path(__file__).resolve().parent
    out = [q.strip() for q in (here / "data" / "demo_questions.txt").read_text().splitlines() if q.strip()]
    for name in ("scifact", "cranfield"):
        lines = (DATA / name / "queries.jsonl").read_text().splitlines()[:30]
        out += [json.loads(x)["text"] for x in lines]
    return out


def fit(tokens: list[int], cpu: list[float]) -> tuple[float, float]:
    """Least squares cpu = a + b * tokens."""
    n = len(tokens)
    mt, mc = sum(tokens) / n, sum(cpu) / n
    b = sum((t - mt) * (c - mc) for t, c in zip(tokens, cpu)) / sum((t - mt) ** 2 for t in tokens)
    return mc - b * mt, b


def tv(share: list[float], truth: list[float]) -> float:
    return sum(abs(s - t) for s, t in zip(share, truth)) / 2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import ragcost
    from bench.cost_attribution import build

    folder = Path(tempfile.mkdtemp(prefix="ragcost-split-"))
    _, embed_only = build(folder)
    texts = queries()
    with ragcost.open(embed_only, write_ledger=False) as s:
        s.warm_up()
        s.query("warm")

        def embed_cpu(ts: list[str]) -> tuple[float, list[dict]]:
            rows = [r for a in s.run_batch([s.state(t) for t in ts]) for r in a.rows if r["stage"] == "embed"]
            return rows[0]["cpu_seconds"], rows

        tokens = {t: n for t, n in zip(texts, embed_tokens(s, texts))}
        alone = {t: [] for t in texts}
        for _ in range(args.repeats):
            for t in texts:
                alone[t].append(embed_cpu([t])[0])
        alone_med = {t: statistics.median(v) for t, v in alone.items()}
        a, b = fit([tokens[t] for t in texts], [alone_med[t] for t in texts])
        c = a / b if b > 0 else float("inf")
        rng = random.Random(args.seed)
        errs: dict[str, list[float]] = {"even": [], "tokens": [], "tokens+c": [], "charged": []}
        batch_cpu, alone_sum = [], []
        for _ in range(args.batches):
            batch = rng.sample(texts, args.batch_size)
            cpu, rows = embed_cpu(batch)
            total_alone = sum(alone_med[t] for t in batch)
            truth = [alone_med[t] / total_alone for t in batch]
            toks = [tokens[t] for t in batch]
            errs["even"].append(tv([1 / len(batch)] * len(batch), truth))
            errs["tokens"].append(tv([n / sum(toks) for n in toks], truth))
            errs["tokens+c"].append(tv([(n + c) / sum(m + c for m in toks) for n in toks], truth))
            charged = [r["busy_share"] if r["busy_share"] is not None else 1 / r["items"] for r in rows]
            errs["charged"].append(tv(charged, truth))
            batch_cpu.append(cpu)
            alone_sum.append(total_alone)
    lengths = sorted(tokens.values())
    out = {"bench": "embed_split", "queries": len(texts), "tokens_min_median_max": [lengths[0], statistics.median(lengths), lengths[-1]],
           "alone_cpu_s_fit": {"fixed_a_s": a, "per_token_b_s": b, "c_tokens": c},
           "alone_cpu_s_shortest_longest": [min(alone_med.values()), max(alone_med.values())],
           "batch_cpu_over_sum_alone": statistics.median(x / y for x, y in zip(batch_cpu, alone_sum)),
           "mean_misplaced_share": {k: statistics.mean(v) for k, v in errs.items()},
           "max_misplaced_share": {k: max(v) for k, v in errs.items()},
           "charged_misplaced_vs_even": statistics.mean(errs["charged"]) / statistics.mean(errs["even"]),
           "target": "the charged split tracks the alone figures better than the average does",
           "pass": statistics.mean(errs["charged"]) < statistics.mean(errs["even"]),
           "loadavg": os.getloadavg(),
           "read": "misplaced share: the fraction of a batch's embed CPU charged to other queries than the alone figures say; "
                   "'charged' is what ragcost's ledger rows split now"}
    print(json.dumps(out, indent=2))


def embed_tokens(s, texts: list[str]) -> list[int]:
    """Tokens each query gives the model (as the stage counts them, capped at the model's window)."""
    emb = s.pipe.embedder
    return [min(n, emb.max_tokens) for n in emb.count_tokens(texts)]


if __name__ == "__main__":
    main()
