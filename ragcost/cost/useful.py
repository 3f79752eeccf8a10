"""Which retrieved documents were useful, and what each useful one cost.

A hit is a dict of the final context with at least ``doc_id`` and ``score``; an answer is a dict
(or object) with ``citations: list[doc_id]``. A document counts once per query even if several
of its chunks made the context.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional, Protocol

from ragcost.errors import ConfigError


class Judge(Protocol):
    """Counts the useful documents in one query's final context."""

    def count(self, hits: Iterable[Mapping[str, Any]], answer: Any = None, query_id: Optional[str] = None) -> float: ...


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


class CalibratedJudge:
    """Useful = expected: the sum over the final documents of P(relevant) from a calibration fit on qrels."""

    def __init__(self, calibration: Any):
        self.calibration = calibration  # ragcost.cost.calibration.Calibration

    def count(self, hits, answer=None, query_id=None) -> float:
        return self.calibration.expected(hits)


_MARK = re.compile(r"\[(\d{1,3})\]")


def supported_citations(answer: str, sources: list[str], unsupported: list[tuple[int, int]]) -> list[str]:
    """Cited document ids, in first-cited order, leaving out those cited only by sentences a grounded check flagged.

    ``sources[n-1]`` is the document of marker ``[n]``; ``unsupported`` are the answer spans the check
    found unsupported. A marker belongs to the text just before it ("... first. [1] Second ... [2]"):
    the sentence holding the last character before the marker that is not a marker or a space.
    """
    text = answer or ""
    blank = _MARK.sub(lambda m: " " * len(m.group()), text)
    out: list[str] = []
    for m in _MARK.finditer(text):
        n = int(m.group(1))
        if not 1 <= n <= len(sources):
            continue
        before = blank[:m.start()].rstrip()
        q = len(before) - 1
        if q >= 0 and any(a <= q < b for a, b in unsupported):
            continue
        if sources[n - 1] not in out:
            out.append(sources[n - 1])
    return out


def make_judge(kind: str, threshold: float | None = None, qrels: Mapping | None = None, calibration: Any = None) -> Judge:
    """A judge by its short name: ``score`` (needs threshold), ``cited``, ``qrels`` (needs qrels),
    ``calibrated`` (needs the calibration)."""
    if kind == "calibrated":
        if calibration is None:
            raise ConfigError("judge 'calibrated' needs a calibration; `ragcost eval SPEC --write` fits one")
        return CalibratedJudge(calibration)
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
    raise ConfigError(f"unknown judge {kind!r}; known: calibrated, cited, qrels, score")


def cost_per_useful(dollars: float, useful: float) -> float | None:
    """Dollars per useful document; ``None`` when nothing useful was delivered (never a division by zero)."""
    return dollars / useful if useful > 0 else None


def useful_of(q: Mapping[str, Any]) -> float:
    """A ledger query row's useful count as its judge made it: the expected count where recorded (a float for the
    expected-useful judge), else the integer. Every part of ``report`` (totals, per stage, the bill, replicas)
    divides by this one count; the rounded integer column alone summed 138 where the expected counts summed 126.1."""
    e = q.get("useful_expected")
    return float(e) if e is not None else int(q.get("useful") or 0)
