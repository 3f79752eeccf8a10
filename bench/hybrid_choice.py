"""The demo's hybrid re-rank settings against plain dense retrieval, on labelled questions: hit@3, hit@1, MRR@5.

    python -m bench.hybrid_choice [--questions FILE ...] [--out bench/out/hybrid_choice.json]

The questions default to the 144 the demo's settings were chosen on (quickstart-on-topic.jsonl and
quickstart-fresh.jsonl); quickstart-fresh2.jsonl is held out and is read by ``bench.useful_demo``.
The pipeline must be indexed (``ragcost index pipelines/quickstart.yaml``). Its embed and retrieve
stages run once; each variant's rerank stage (the real one) re-ranks a copy of their hits. hit@k:
a topic that answers the question among the first k documents.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEEN = [REPO / "eval" / "useful" / "quickstart-on-topic.jsonl", REPO / "eval" / "useful" / "quickstart-fresh.jsonl"]
DEMO = {"backend": "hybrid", "tokenizer": "code", "stopwords": "code", "stem": True, "top_n": 5}
# What was tried, in order, on the seen questions; "plain dense" has no rerank stage.
VARIANTS: dict[str, dict | None] = {
    "plain dense": None,
    "hybrid code/code/stem (the demo before)": DEMO,
    "sparse_weight 0.5": {**DEMO, "sparse_weight": 0.5},
    "sparse_weight 0.25": {**DEMO, "sparse_weight": 0.25},
    "prose_weight 0": {**DEMO, "prose_weight": 0.0},
    "prose_weight 0.25": {**DEMO, "prose_weight": 0.25},
    "prose_weight 0.4": {**DEMO, "prose_weight": 0.4},
    "prose_weight 0.5 (the demo)": {**DEMO, "prose_weight": 0.5},
    "prose_weight 0.6": {**DEMO, "prose_weight": 0.6},
    "prose_weight 0.75": {**DEMO, "prose_weight": 0.75},
    "sparse_weight 0.5, prose_weight 0.25": {**DEMO, "sparse_weight": 0.5, "prose_weight": 0.25},
    "rrf_k 20": {**DEMO, "rrf_k": 20},
    "rrf_k 20, prose_weight 0.5": {**DEMO, "rrf_k": 20, "prose_weight": 0.5},
    "hybrid defaults (words/en), prose_weight 0.5": {"backend": "hybrid", "top_n": 5, "prose_weight": 0.5},
}


def measure(pipeline: Path, questions: list[Path], variants: dict[str, dict | None] = VARIANTS) -> dict:
    from ragcost.evaluate.labelled import doc_order, read_labelled
    from ragcost.records import QueryState, UsageRecord
    from ragcost.runtime.pipeline import Pipeline
    from ragcost.stages.rerank import Rerank

    qs = [q for f in questions for q in read_labelled(f)]
    pipe = Pipeline.load(pipeline)
    try:
        k = next(s.params.k for s in pipe.stages() if s.type == "retrieve")
        states = [QueryState(text=q.text, id=q.id, k=k) for q in qs]
        for st in pipe.stages():
            if st.type in ("embed", "retrieve"):
                st.warm_up()
                st.run([s for s in states if s.active], UsageRecord(stage=st.type, resource="cpu", items=len(states)))
        out: dict = {"benchmark": "hybrid_choice", "pipeline": str(pipeline), "retrieve_k": k,
                     "questions": [str(p.relative_to(REPO) if p.is_relative_to(REPO) else p) for p in questions],
                     "n": len(qs), "variants": {}}
        for name, params in variants.items():
            got = []
            for s in states:  # the dense hits, each variant on its own copies (the stage rewrites scores)
                g = QueryState(text=s.text, id=s.id, k=s.k)
                g.hits = [copy.copy(h) for h in s.hits]
                got.append(g)
            if params is not None:
                Rerank(Rerank.Params(**params), pipe).run(got, UsageRecord(stage="rerank", resource="cpu", items=len(got)))
            docs = [doc_order(s.hits) for s in got]
            hit = [bool(set(d[:3]) & set(q.topics)) for d, q in zip(docs, qs)]
            out["variants"][name] = {
                "params": params,
                "hit_at_3": sum(hit), "hit_at_1": sum(bool(set(d[:1]) & set(q.topics)) for d, q in zip(docs, qs)),
                "mrr_at_5": round(sum(next((1 / r for r, x in enumerate(d[:5], 1) if x in q.topics), 0.0)
                                      for d, q in zip(docs, qs)) / len(qs), 4),
                "missed_at_3": [q.id for h, q in zip(hit, qs) if not h],
            }
    finally:
        pipe.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", type=Path, default=REPO / "pipelines" / "quickstart.yaml")
    ap.add_argument("--questions", type=Path, nargs="+", default=SEEN)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    from bench.common import emit_to

    res = measure(a.pipeline, [p.resolve() for p in a.questions])
    return emit_to(res, a.out)


if __name__ == "__main__":
    sys.exit(main())
