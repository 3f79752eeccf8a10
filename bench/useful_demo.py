"""The demo's useful-document count against labelled questions: abstains off topic, answers on topic, retrieves the topic.

    python -m bench.useful_demo [--pipeline pipelines/quickstart.yaml] [--out bench/out/useful_demo.json]

Runs eval/useful/quickstart-{on,off}-topic.jsonl, quickstart-fresh.jsonl, quickstart-fresh2.jsonl and the new kinds
(quickstart-{off,on}-kinds.jsonl: `new_kinds`) through the pipeline
(it must be indexed: `ragcost index pipelines/quickstart.yaml`), with the pipeline's own judge,
and prints JSON: per split (dev chose the abstention default, test checks it; fresh holds on-topic
questions only), the share of off-topic questions that abstain or count < 0.5 useful, the share
of on-topic questions that answer with >= 0.5 useful, the extractive evidence (question words in
the best passage) at which each level would abstain, and hit@3 of the demo chain against plain
dense retrieval (embed + retrieve alone) over every on-topic question, per split and per kind
(identifier / terse / paraphrase). The demo's chain was chosen on dev, test and fresh (144 questions,
``bench.hybrid_choice``); ``fresh2`` was written and committed before any chain ran on it. ``pass``
holds the issue's targets: >= 0.9 and >= 0.9 on test, and chain > dense on fresh2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ON = REPO / "eval" / "useful" / "quickstart-on-topic.jsonl"
OFF = REPO / "eval" / "useful" / "quickstart-off-topic.jsonl"
FRESH = REPO / "eval" / "useful" / "quickstart-fresh.jsonl"
FRESH2 = REPO / "eval" / "useful" / "quickstart-fresh2.jsonl"
# Off-topic questions of kinds the abstention was not chosen on (other languages' syntax, libraries and tools
# outside the corpus, history and people, nonsense) and on-topic ones that name another language or tool:
# dev and test written before any rule ran on them, fresh written after abstain_unknown was chosen on dev.
OFF_KINDS = REPO / "eval" / "useful" / "quickstart-off-kinds.jsonl"
ON_KINDS = REPO / "eval" / "useful" / "quickstart-on-kinds.jsonl"
SPLITS = ("dev", "test", "fresh", "fresh2")


def measure(pipeline: Path) -> dict:
    from ragcost.evaluate.labelled import dense_docs, read_labelled, run_labelled
    from ragcost.runtime.pipeline import Pipeline

    on, off = read_labelled(ON) + read_labelled(FRESH) + read_labelled(FRESH2), read_labelled(OFF)
    kind = {json.loads(x)["_id"]: json.loads(x).get("kind", "original")
            for p in (ON, FRESH, FRESH2) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()}
    off_kinds, on_kinds = read_labelled(OFF_KINDS), read_labelled(ON_KINDS)
    kinds_of = {json.loads(x)["_id"]: json.loads(x)["kind"] for p in (OFF_KINDS, ON_KINDS)
                for x in p.read_text(encoding="utf-8").splitlines() if x.strip()}
    pipe = Pipeline.load(pipeline)
    try:
        got_on, got_off = run_labelled(pipe, on), run_labelled(pipe, off)
        dense = dense_docs(pipe, on)
        got_off_kinds, got_on_kinds = run_labelled(pipe, off_kinds), run_labelled(pipe, on_kinds)
    finally:
        pipe.close()
    out: dict = {"benchmark": "useful_demo", "pipeline": str(pipeline), "judge": pipe.config.useful.judge, "splits": {}}
    def share(n: int, of: list) -> float | None:
        return n / len(of) if of else None

    for split in SPLITS:
        a = [o for o in got_on if o.question.split == split]
        b = [o for o in got_off if o.question.split == split]
        out["splits"][split] = {
            "on_topic": len(a), "off_topic": len(b),
            "on_topic_answered_ge_half_useful": share(sum(o.useful >= 0.5 and not o.abstained for o in a), a),
            "off_topic_abstained_or_lt_half_useful": share(sum(o.abstained or o.useful < 0.5 for o in b), b),
            "off_topic_abstained": share(sum(o.abstained for o in b), b),
            "evidence_on": sorted(round(o.evidence or 0, 3) for o in a),
            "evidence_off": sorted(round(o.evidence or 0, 3) for o in b),
        }
    out["new_kinds"] = {}
    for split in ("dev", "test", "fresh"):
        a = [o for o in got_on_kinds if o.question.split == split]
        b = [o for o in got_off_kinds if o.question.split == split]
        right_off = {k: [sum(o.abstained or o.useful < 0.5 for o in b if kinds_of[o.question.id] == k),
                         sum(kinds_of[o.question.id] == k for o in b)] for k in sorted({kinds_of[o.question.id] for o in b})}
        out["new_kinds"][split] = {
            "on_topic": len(a), "off_topic": len(b),
            "on_topic_answered_ge_half_useful": share(sum(o.useful >= 0.5 and not o.abstained for o in a), a),
            "off_topic_abstained_or_lt_half_useful": share(sum(o.abstained or o.useful < 0.5 for o in b), b),
            "off_topic_by_kind": right_off,  # kind -> [abstained or < 0.5 useful, questions]
            "answered_off_topic": [o.question.id for o in b if not o.abstained and o.useful >= 0.5],
            "refused_on_topic": [o.question.id for o in a if o.abstained or o.useful < 0.5],
        }
    chain = sum(o.hit_at(3) for o in got_on) / len(got_on)
    plain = sum(bool(set(d[:3]) & set(o.question.topics)) for d, o in zip(dense, got_on)) / len(got_on)
    def hits(pairs: list) -> dict:
        return {"questions": len(pairs), "demo_chain": sum(o.hit_at(3) for _, o in pairs),
                "plain_dense": sum(bool(set(d[:3]) & set(o.question.topics)) for d, o in pairs)}

    by_split = {split: hits([(d, o) for d, o in zip(dense, got_on) if o.question.split == split]) for split in SPLITS}
    by_kind = {f"{split}/{k}": hits([(d, o) for d, o in zip(dense, got_on) if o.question.split == split and kind[o.question.id] == k])
               for split in SPLITS for k in sorted({kind[o.question.id] for o in got_on if o.question.split == split})}
    out["hit_at_3"] = {"questions": len(got_on), "demo_chain": chain, "plain_dense": plain, "by_split": by_split, "by_kind": by_kind,
                       "missed_by_dense_found_by_chain": [o.question.id for d, o in zip(dense, got_on)
                                                          if o.hit_at(3) and not set(d[:3]) & set(o.question.topics)],
                       "found_by_dense_missed_by_chain": [o.question.id for d, o in zip(dense, got_on)
                                                          if not o.hit_at(3) and set(d[:3]) & set(o.question.topics)]}
    t = out["splits"]["test"]
    out["pass"] = {"off_topic_ge_0.9": t["off_topic_abstained_or_lt_half_useful"] >= 0.9,
                   "on_topic_ge_0.9": t["on_topic_answered_ge_half_useful"] >= 0.9,
                   "chain_beats_dense_hit_at_3_fresh2": by_split["fresh2"]["demo_chain"] > by_split["fresh2"]["plain_dense"]}
    out["per_question"] = [{"id": o.question.id, "useful": round(o.useful, 3), "abstained": o.abstained,
                            "evidence": round(o.evidence or 0, 3), "top3": o.docs[:3], **({"dense_top3": d[:3]} if d is not None else {})}
                           for o, d in zip(got_on + got_off, dense + [None] * len(got_off))]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", type=Path, default=REPO / "pipelines" / "quickstart.yaml")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    from bench.common import emit_to

    res = measure(a.pipeline)
    return emit_to(res, a.out)


if __name__ == "__main__":
    sys.exit(main())
