"""Labelled questions over a corpus without qrels (the demo's): does the pipeline answer or abstain, and retrieve the topic?

A labelled question file is JSON lines: ``{"_id", "text", "topics": [doc ids that answer it], "split": "dev"|"test"}``;
an off-topic question has no ``topics`` (the corpus cannot answer it). ``dev`` questions choose a
level (the abstention default); ``test`` questions check it, unseen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ragcost.errors import IngestError


@dataclass
class Labelled:
    id: str
    text: str
    topics: list[str] = field(default_factory=list)
    split: str = "test"


@dataclass
class Outcome:
    """One question through a pipeline: its useful count, whether it abstained, its documents best first."""

    question: Labelled
    useful: float
    abstained: bool
    docs: list[str]
    evidence: Optional[float] = None  # the extractive backend's overlap share

    def hit_at(self, k: int) -> bool:
        return bool(set(self.docs[:k]) & set(self.question.topics))


def read_labelled(path: str | Path) -> list[Labelled]:
    p = Path(path)
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            out.append(Labelled(str(d["_id"]), str(d["text"]), [str(t) for t in d.get("topics") or []], d.get("split", "test")))
        except (ValueError, KeyError, TypeError) as e:
            raise IngestError(f"{p}:{n}: not a labelled question ({type(e).__name__}: {e}); "
                              'each line is {"_id": ..., "text": ..., "topics": [...], "split": "dev"|"test"}') from None
    return out


def run_labelled(pipe: Any, questions: list[Labelled], batch_size: int = 16) -> list[Outcome]:
    """Each question through ``pipe`` (no ledger), with its judge's useful count."""
    from ragcost.generate.extractive import evidence
    from ragcost.generate.params import BackendParams
    from ragcost.generate.prompt import build_prompt
    from ragcost.runtime.query import run_queries

    run = run_queries(pipe, [(q.id, q.text) for q in questions], batch_size=batch_size, write_ledger=False)
    out = []
    params = BackendParams()
    for q, s, n in zip(questions, run.states, run.useful):
        gen = s.generation
        ev = evidence(q.text, build_prompt(q.text, s.hits, params)) if s.hits else 0.0
        out.append(Outcome(q, float(n), bool(gen.get("abstained")), doc_order(s.hits), ev))
    return out


def dense_docs(pipe: Any, questions: list[Labelled]) -> list[list[str]]:
    """The documents of the pipeline's embed + retrieve stages alone (plain dense retrieval), best first."""
    from ragcost.records import QueryState

    stages = [s for s in pipe.stages() if s.embeds_queries or s.fetches_hits]
    states = [QueryState(text=q.text, id=q.id, k=_k(pipe)) for q in questions]
    for st in stages:
        st.warm_up()
        from ragcost.records import UsageRecord

        st.run([s for s in states if s.active], UsageRecord(stage=st.type, resource="cpu"))
    return [doc_order(s.hits) for s in states]


def _k(pipe: Any) -> int:
    for st in pipe.stages():
        if st.fetches_hits:
            return st.final_k(st.params)
    return 10


def doc_order(hits: list) -> list[str]:
    """The hits' documents, best first, each once."""
    seen: list[str] = []
    for h in hits:
        if h.doc_id not in seen:
            seen.append(h.doc_id)
    return seen
