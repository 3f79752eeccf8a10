"""Which retrieved documents were useful, and what each useful one cost.

A hit is a dict of the final context with at least ``doc_id`` and ``score``; an answer is a dict
(or object) with ``citations: list[doc_id]``. A document counts once per query even if several
of its chunks made the context.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Protocol

from ragcost.errors import ConfigError


class Judge(Protocol):
    """Counts the useful documents in one query's final context."""

    def count(self, hits: Iterable[Mapping[str, Any]], answer: Any = None, query_id: Optional[str] = None) -> int: ...


def _citations(answer: Any) -> list[str]:
    if answer is None:
        return []
    cited = answer.get("citations") if isinstance(answer, Mapping) else getattr(answer, "citations", None)
    return [str(c) for c in (cited or [])]


class ScoreJudge:
    """Useful = the retrieval or re-ranker score is at or above ``threshold``."""

    def __init__(self, threshold: float):
        self.threshold = float(threshold)

    def count(self, hits, answer=None, query_id=None) -> int:
        return len({str(h["doc_id"]) for h in hits if h.get("score") is not None and h["score"] >= self.threshold})


class CitedJudge:
    """Useful = in the final context and cited by the answer."""

    def count(self, hits, answer=None, query_id=None) -> int:
        cited = set(_citations(answer))
        return len({str(h["doc_id"]) for h in hits} & cited)


class QrelsJudge:
    """Useful = relevant by the dataset's graded qrels (score >= 1), for evaluation runs."""

    def __init__(self, qrels: Mapping[str, Mapping[str, float]]):
        self.qrels = {str(q): {str(d): s for d, s in docs.items()} for q, docs in qrels.items()}

    def count(self, hits, answer=None, query_id=None) -> int:
        if query_id is None:
            raise ConfigError("QrelsJudge needs the query_id to look up its qrels; pass query_id=")
        rel = self.qrels.get(str(query_id), {})
        return len({str(h["doc_id"]) for h in hits if rel.get(str(h["doc_id"]), 0) >= 1})


def make_judge(kind: str, threshold: float | None = None, qrels: Mapping | None = None) -> Judge:
    """A judge by its short name: ``score`` (needs threshold), ``cited``, ``qrels`` (needs qrels)."""
    if kind == "score":
        if threshold is None:
            raise ConfigError("judge 'score' needs a threshold, e.g. {judge: score, threshold: 0.5}")
        return ScoreJudge(threshold)
    if kind == "cited":
        return CitedJudge()
    if kind == "qrels":
        if qrels is None:
            raise ConfigError("judge 'qrels' needs the dataset's qrels")
        return QrelsJudge(qrels)
    raise ConfigError(f"unknown judge {kind!r}; known: cited, qrels, score")


def cost_per_useful(dollars: float, useful: int) -> float | None:
    """Dollars per useful document; ``None`` when nothing useful was delivered (never a division by zero)."""
    return dollars / useful if useful > 0 else None
