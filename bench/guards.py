"""What the guards cost in the demo, and whether the cheaper grounded check says the same; prints JSON.

``python -m bench.guards [--quick] [--out bench/out/guards.json]``

1. **labelled**: the labelled answer sentences (``bench/data/grounded_labelled.jsonl``, made by
   ``python -m bench.grounded_set``) checked against their passage by ragcost 0.1's check
   (``mode: reembed``) and the new one (``mode: stored``, index-time sentence vectors), and by the new
   one on an index without sentence vectors (``sentence_vectors: query``): the share of sentences
   each gives the same verdict as the old one, and precision / recall of "unsupported" against the
   labels. The passages are indexed by ``ragcost index`` (one chunk each) into a folder of their own.
2. **grounded_cpu**: on the 20 demo questions (``bench/data/demo_questions.txt``) through
   pipelines/quickstart.yaml, the grounded check's process CPU-seconds per query, old and new,
   measured side by side on the same query states (each check run ``REPEAT`` times, alternating,
   the median kept), and whether their per-sentence verdicts agree.
3. **demo**: the 20 questions through ``run_queries(..., batch_size=1)`` (what ``ragcost query
   pipelines/quickstart.yaml --queries FILE --batch-size 1`` runs) in a warm process: each stage's
   share of the $, the per-query latency p50 (the sum of the stage calls that served it) and the
   CPU-seconds per query; and each query guard check's (pii, prompt_injection, budget) CPU share.

The machine this runs on may be shared: CPU-seconds (``time.process_time``) are reported next to
wall times, and the old/new ratio is measured in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
LABELLED = ROOT / "bench" / "data" / "grounded_labelled.jsonl"
QUESTIONS = ROOT / "bench" / "data" / "demo_questions.txt"
QUICKSTART = ROOT / "pipelines" / "quickstart.yaml"
CACHE = Path(os.environ.get("RAGCOST_BENCH_CACHE", Path.home() / ".cache" / "ragcost-bench"))
REPEAT = 1
TARGETS = {"cpu_ratio_min": 10.0, "guard_share_max": 0.10, "p50_ms_max": 100.0, "agreement_min": 0.99}


# ---- the labelled set -------------------------------------------------------------------------
def read_labelled(path: Path = LABELLED, limit: Optional[int] = None) -> list[dict]:
    items = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return items[:limit] if limit else items


def labelled_pipeline(items: list[dict], folder: Path, sentence_vectors: bool = True):
    """A pipeline whose corpus is the items' passages, one chunk each (text as the passage), indexed."""
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline

    folder.mkdir(parents=True, exist_ok=True)
    passages = {it["passage_id"]: it["passage"] for it in items}
    corpus = folder / "passages.jsonl"
    corpus.write_text("".join(json.dumps({"id": k, "title": "", "text": v}) + "\n" for k, v in sorted(passages.items())))
    check = {"check": "grounded", "cited_only": True}
    if not sentence_vectors:
        check["sentence_vectors"] = "query"
    cfg = {
        "name": "grounded_labelled", "store": f"duckdb:///{folder / 'store.duckdb'}", "index_dir": str(folder / "index"),
        "source": {"path": str(corpus), "reader": "jsonl"},
        "chunking": {"size": 254, "overlap": 32, "title": "none"},
        "embed": {"type": "sentence-transformers", "model": "all-MiniLM-L6-v2", "batch_size": 32},
        "index": {"backend": "faiss", "kind": "flat"}, "pricing": str(ROOT / "pricing" / "default.yaml"),
        "stages": [{"type": "retrieve", "k": 1}, {"type": "guard", "on": "answer", "checks": [check]}],
    }
    path = folder / "pipeline.yaml"
    path.write_text(json.dumps(cfg))
    pipe = Pipeline.load(path)
    run_index(pipe, prune=True)
    labels, texts = pipe.store().chunk_column("text")
    _, docs = pipe.store().chunk_column("doc_id")
    by_doc = {d: (int(l), t) for l, d, t in zip(labels, docs, texts)}
    for pid, text in passages.items():  # each passage must be one stored chunk, as written
        if by_doc.get(pid, (None, None))[1] != text:
            raise SystemExit(f"bench.guards: passage {pid} was not stored as one chunk of the same text")
    return pipe, {pid: lt[0] for pid, lt in by_doc.items()}


def grounded(pipe, **params):
    """A grounded check (cited_only, as in the demo) over ``pipe`` as its context."""
    from ragcost.guards.grounded import GroundedGuard

    g = GroundedGuard(GroundedGuard.Params(cited_only=True, **params), pipe)
    g.warm_up()
    return g


def label_states(items: list[dict], labels: dict[str, int]):
    """One query state per passage: its items' sentences as the answer, one a line (so each is split alone),
    citing the passage; and per item the character range of its sentence in that answer."""
    from ragcost.records import Hit, QueryState

    by_passage: dict[str, list[int]] = {}
    for n, it in enumerate(items):
        by_passage.setdefault(it["passage_id"], []).append(n)
    states, where = [], {}
    for pid, ns in by_passage.items():
        parts, pos = [], 0
        for n in ns:
            text = f"{items[n]['sentence']} [1]"
            where[n] = (len(states), pos, pos + len(text))
            parts.append(text)
            pos += len(text) + 1
        it = items[ns[0]]
        states.append(QueryState(text="q", hits=[Hit(labels[pid], pid, 1.0, text=it["passage"])],
                                 answer="\n".join(parts), citations=[pid]))
    return states, where


def flagged(guard, items, labels, batch: int = 8) -> tuple[list[bool], float]:
    """Per item whether the check flags (any part of) its sentence, and the CPU-seconds it took."""
    states, where = label_states(items, labels)
    c0 = time.process_time()
    for i in range(0, len(states), batch):
        guard.check(states[i:i + batch], "answer")
    cpu = time.process_time() - c0
    out = []
    for n in range(len(items)):
        si, a, b = where[n]
        verdicts = [v for v in states[si].notes.get("grounded", []) if a <= v["span"][0] < b]
        out.append(any(not v["supported"] for v in verdicts))
    return out, cpu


def scores(pred: list[bool], items: list[dict]) -> dict[str, Any]:
    """Precision and recall of "unsupported" (flagged) against the labels, overall and per kind."""
    def pr(rows):
        tp = sum(p and it["label"] == "unsupported" for p, it in rows)
        fp = sum(p and it["label"] == "supported" for p, it in rows)
        fn = sum((not p) and it["label"] == "unsupported" for p, it in rows)
        return {"precision": round(tp / (tp + fp), 4) if tp + fp else None,
                "recall": round(tp / (tp + fn), 4) if tp + fn else None, "tp": tp, "fp": fp, "fn": fn}

    rows = list(zip(pred, items))
    kinds = sorted({it["kind"] for it in items})
    return {**pr(rows), "flagged_by_kind": {k: f"{sum(p for p, it in rows if it['kind'] == k)}/{sum(it['kind'] == k for it in items)}"
                                            for k in kinds}}


def labelled(limit: Optional[int] = None) -> dict[str, Any]:
    items = read_labelled(limit=limit)
    pipe, labels = labelled_pipeline(items, CACHE / "guards-labelled")
    try:
        old, old_cpu = flagged(grounded(pipe, mode="reembed"), items, labels)
        new, new_cpu = flagged(grounded(pipe), items, labels)
        noidx, noidx_cpu = flagged(grounded(pipe, sentence_vectors="query"), items, labels)
        model, model_cpu = flagged(grounded(pipe, verbatim=False), items, labels)
    finally:
        pipe.close()
    same = lambda a, b: round(sum(x == y for x, y in zip(a, b)) / len(a), 4)  # noqa: E731
    old_s, new_s = scores(old, items), scores(new, items)
    differ = [{"id": it["id"], "kind": it["kind"], "label": it["label"], "old_flagged": a, "new_flagged": b}
              for it, a, b in zip(items, old, new) if a != b]
    no_worse = all((new_s[k] or 0) >= (old_s[k] or 0) for k in ("precision", "recall"))
    return {
        "sentences": len(items), "unsupported": sum(it["label"] == "unsupported" for it in items),
        "by_corpus": {c: sum(it["corpus"] == c for it in items) for c in sorted({it["corpus"] for it in items})},
        "old": {**old_s, "cpu_s": round(old_cpu, 3)},
        "new": {**new_s, "cpu_s": round(new_cpu, 3), "same_verdict_as_old": same(old, new)},
        "new_without_index_sentence_vectors": {"same_verdict_as_old": same(old, noidx), "same_verdict_as_new": same(new, noidx),
                                               "cpu_s": round(noidx_cpu, 3)},
        "new_without_verbatim": {"same_verdict_as_old": same(old, model), "cpu_s": round(model_cpu, 3)},
        "verdicts_that_differ": differ,
        "pass_agreement": same(old, new) >= TARGETS["agreement_min"],
        "pass_no_worse": no_worse,
    }


# ---- the demo ---------------------------------------------------------------------------------
def demo_pipeline():
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(QUICKSTART)
    run_index(pipe)  # nothing to embed when the demo was indexed; the sentence vectors once
    pipe.warm_up()
    return pipe


def questions(limit: Optional[int] = None) -> list[str]:
    qs = [q.strip() for q in QUESTIONS.read_text(encoding="utf-8").splitlines() if q.strip()]
    return qs[:limit] if limit else qs


def answered(pipe, qs: list[str]):
    """The query states as the demo's answer guard receives them (every stage before it has run)."""
    from ragcost.records import QueryState
    from ragcost.runtime.runner import Runner

    stages = pipe.stages()
    last = max(i for i, st in enumerate(stages) if st.type == "guard" and st.params.on == "answer")
    states = [QueryState(text=q, id=f"q{i}", k=20) for i, q in enumerate(qs)]
    for s in states:
        Runner(stages[:last], pipe.price_book).run([s])
    return states


def _cpu(guard, state, times: int) -> float:
    c0 = time.process_time()
    for _ in range(times):
        guard.check([state], "answer")
    return (time.process_time() - c0) / times


def grounded_cpu(pipe, qs: list[str]) -> dict[str, Any]:
    states = answered(pipe, qs)
    old, new, model = grounded(pipe, mode="reembed"), grounded(pipe), grounded(pipe, verbatim=False)
    for g in (old, new, model):  # one pass each first: lazy loads are no query's cost
        g.check([states[0]], "answer")
    per = {"old": [], "new": [], "new_without_verbatim": []}
    agree, sentences, verbatim = 0, 0, 0
    for s in states:
        runs = {k: [] for k in per}
        for _ in range(REPEAT):  # alternating, so load on the machine falls on both alike
            runs["old"].append(_cpu(old, s, 1))
            runs["new"].append(_cpu(new, s, 1))
            runs["new_without_verbatim"].append(_cpu(model, s, 1))
        for k in per:
            per[k].append(statistics.median(runs[k]))
        old.check([s], "answer")
        a = [v["supported"] for v in s.notes.get("grounded", [])]
        new.check([s], "answer")
        b = [v["supported"] for v in s.notes.get("grounded", [])]
        verbatim += new.stage_notes().get("verbatim", 0)
        sentences += len(a)
        agree += sum(x == y for x, y in zip(a, b))
    mean = {k: statistics.mean(v) for k, v in per.items()}
    ratio = mean["old"] / mean["new"] if mean["new"] else None
    return {
        "questions": len(states), "answer_sentences": sentences, "settled_verbatim": verbatim,
        "same_verdict": f"{agree}/{sentences}",
        "cpu_s_per_query": {k: round(v, 5) for k, v in mean.items()},
        "ratio_old_to_new": round(ratio, 1) if ratio else None,
        "ratio_old_to_new_without_verbatim": round(mean["old"] / mean["new_without_verbatim"], 1) if mean["new_without_verbatim"] else None,
        "pass_cpu_ratio": bool(ratio and ratio >= TARGETS["cpu_ratio_min"]),
    }


def demo_run(pipe, qs: list[str]) -> dict[str, Any]:
    from ragcost.runtime.query import run_queries

    items = [(f"q{i}", q) for i, q in enumerate(qs)]
    run_queries(pipe, items[:3], batch_size=1, write_ledger=False)  # warm: first-call costs go to no measured query
    c0, t0 = time.process_time(), time.perf_counter()
    run = run_queries(pipe, items, batch_size=1, write_ledger=False)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    latency = [sum(c.record.wall_seconds for c in run.calls if c.serves(s)) * 1000 for s in run.states]
    stats = run.stage_stats()
    total = run.total_usd
    share = {st.stage: round(st.cost_usd / total, 4) for st in stats}
    share["index storage"] = round(run.storage_usd / total, 4)
    p50 = statistics.median(latency)
    return {
        "queries": len(qs), "batch_size": 1, "usd_per_query": total / len(qs),
        "share_of_usd": share, "stage_p50_ms": {st.stage: round(st.pct_ms(50), 2) for st in stats},
        "query_p50_ms": round(p50, 1), "query_p95_ms": round(sorted(latency)[int(0.95 * (len(latency) - 1))], 1),
        "cpu_s_per_query": round(cpu / len(qs), 4), "wall_s_per_query": round(wall / len(qs), 4),
        "answer_guard_notes": next((st.notes for st in stats if st.stage == "guard:answer"), {}),
        "pass_guard_share": share.get("guard:answer", 0.0) <= TARGETS["guard_share_max"],
        "pass_p50": p50 <= TARGETS["p50_ms_max"],
    }


def query_guard_shares(pipe, qs: list[str]) -> dict[str, Any]:
    """Each query-side check alone on the demo questions: CPU-seconds per query and its share of the query's CPU."""
    from ragcost.records import QueryState
    from ragcost.stages.guard import GuardStage
    from ragcost.records import UsageRecord

    checks = {"pii": "pii", "prompt_injection": "prompt_injection",
              "budget": {"check": "budget", "resource": "openai-gpt-4o-mini", "limit_usd": 0.01, "context_tokens": 1100}}
    out = {}
    for name, spec in checks.items():
        stage = GuardStage(GuardStage.Params(on="query", checks=[spec]), pipe)
        stage.warm_up()
        stage.run([QueryState(text=qs[0])], UsageRecord(stage="w", resource="cpu"))
        c0 = time.process_time()
        for _ in range(REPEAT):
            for q in qs:
                stage.run([QueryState(text=q)], UsageRecord(stage=stage.name, resource="cpu"))
        out[name] = {"cpu_s_per_query": round((time.process_time() - c0) / (REPEAT * len(qs)), 7)}
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.guards", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="60 labelled sentences and 5 questions (a smoke run)")
    ap.add_argument("--part", choices=["all", "labelled", "demo"], default="all", help="run only the labelled set or only the demo")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    result: dict[str, Any] = {"bench": "guards", "targets": TARGETS, "cpus": os.cpu_count(),
                              "loadavg_at_start": list(os.getloadavg())}
    if args.part in ("all", "labelled"):
        result["labelled"] = labelled(60 if args.quick else None)
    if args.part in ("all", "demo"):
        qs = questions(5 if args.quick else None)
        pipe = demo_pipeline()
        try:
            result["grounded_cpu"] = grounded_cpu(pipe, qs)
            result["demo"] = demo_run(pipe, qs)
            shares = query_guard_shares(pipe, qs)
            per_query = result["demo"]["cpu_s_per_query"]
            for v in shares.values():
                v["share_of_query_cpu"] = round(v["cpu_s_per_query"] / per_query, 4) if per_query else None
            result["query_guards"] = shares
        finally:
            pipe.close()
    result["loadavg_at_end"] = list(os.getloadavg())
    result["seconds"] = round(time.perf_counter() - t0, 1)
    parts = [p for p in ("labelled", "grounded_cpu", "demo") if p in result]
    result["pass"] = all(v for part in parts for k, v in result[part].items() if k.startswith("pass_"))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
