"""Releasing a held stream a sentence at a time.

A pipeline whose answer guard may block holds a stream: nothing of the answer may leave before the
guard passed it. Holding it whole costs the time to first token of the whole answer. The gate
releases it a sentence at a time instead. Each sentence is sent once it is complete (the next one
has begun) and every blocking check on the answer passed it: checked on its own, against the same
hits, as citing the sources the stream has cited so far. After a flagged sentence nothing more
leaves until the whole answer's check has run: the rest is sent if it passed, and the refusal if it
did not. The last sentence always waits for that check.

Why a sentence the gate released never fails the final check: a check here is a per-sentence check
(grounded: each sentence must be supported by the passages; a text scanner such as PII or a
keyword finds what is in the sentence), and the final answer cites at least the sources cited
so far, so its passages include the gate's. A guard that is not marked ``per_sentence`` (its
verdict on an answer is the union of its verdicts on the sentences) holds the stream whole. So is a pipeline whose answer guard
redacts or escalates, because the final text may then differ from what was streamed.

The checks run in the batch thread, inside the generate stage's call: their CPU is generate's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from ragcost.generate.prompt import CITE as _CITE
from ragcost.guards.sentence_split import SENTENCE_END as _BOUNDARY  # the grounded check's own sentence rule
from ragcost.records import QueryState


@dataclass
class _Stream:
    sources: list[str] = field(default_factory=list)
    text: str = ""  # everything streamed so far
    released: int = 0  # characters of ``text`` sent
    stopped: bool = False  # a sentence was flagged (or the attempt restarted): hold the rest


class SentenceGate:
    def __init__(self, checks: list[Any]) -> None:
        self.checks = checks  # the blocking guards on the answer
        self._streams: dict[int, _Stream] = {}

    @classmethod
    def of(cls, pipe) -> Optional["SentenceGate"]:
        """A gate for ``pipe``'s blocking answer checks; None when the stream must be held whole (or need not be held)."""
        checks: list[Any] = []
        for st in pipe.stages():
            got = st.sentence_checks()
            if got is None:
                return None
            checks += got
        return cls(checks) if checks else None

    def event(self, s: QueryState, kind: str, payload: str) -> list[str]:
        """What of ``s``'s stream may leave after this generate event (text to send, in order)."""
        st = self._streams.setdefault(id(s), _Stream())
        if kind == "sources":
            if st.text:  # a second attempt after text was streamed: its text may differ, hold the rest
                st.stopped = True
            st.sources = list(json.loads(payload))
            return []
        if kind != "text":
            st.stopped = True  # a retry, fallback or escalation: the final text may not continue this one
            return []
        st.text += payload
        if st.stopped:
            return []
        out: list[str] = []
        ends = [m.start() for m in _BOUNDARY.finditer(st.text, st.released)]
        for end in ends:  # each complete sentence after the released part, in order
            piece = st.text[st.released:end]
            if piece.strip() and self._flagged(s, piece, st):
                st.stopped = True
                break
            start, nxt = st.released, _BOUNDARY.match(st.text, end)
            st.released = nxt.end() if nxt else end
            out.append(st.text[start:st.released])  # the sentence and the space after it
        return out

    def released(self, s: QueryState) -> str:
        st = self._streams.get(id(s))
        return st.text[:st.released] if st else ""

    def forget(self, s: QueryState) -> None:
        self._streams.pop(id(s), None)

    def _flagged(self, s: QueryState, piece: str, st: _Stream) -> bool:
        """Whether any blocking check flags ``piece`` on its own, citing what the stream cited so far."""
        cited = []
        for m in _CITE.finditer(st.text):
            n = int(m.group(1))
            if 1 <= n <= len(st.sources) and st.sources[n - 1] not in cited:
                cited.append(st.sources[n - 1])
        probe = QueryState(text=s.text, id=s.id, k=s.k, hits=s.hits, answer=piece, citations=cited, tenant=s.tenant,
                           keep=s.keep)
        return any(found for guard in self.checks for found in guard.check([probe], "answer"))
