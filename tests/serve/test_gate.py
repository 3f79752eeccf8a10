"""A held stream released a sentence at a time: a sentence leaves once the blocking checks passed it,
and nothing after a flagged sentence leaves."""

from __future__ import annotations

import json
import time

import httpx

from ragcost.guards.base import Finding, Guard
from ragcost.records import QueryState
from ragcost.serve.gate import SentenceGate
from tests.serve.conftest import ServerThread, variant

ACME = {"authorization": "Bearer key-acme"}


class Secret(Guard):
    name = "secret"
    per_sentence = True

    def __init__(self) -> None:
        super().__init__(None)
        self.seen: list[tuple[str, list[str]]] = []

    def check(self, batch, on):
        self.seen += [(s.answer, list(s.citations)) for s in batch]
        return [[Finding(self.name, "word", 1.0, on="answer")] if "secret" in (s.answer or "") else [] for s in batch]


def test_sentences_leave_once_checked_and_nothing_after_a_flagged_one():
    g = Secret()
    gate, s = SentenceGate([g]), QueryState("q")
    assert gate.event(s, "sources", json.dumps(["d1", "d2"])) == []
    assert gate.event(s, "text", "First sentence here. [1] Sec") == ["First sentence here. "]
    assert g.seen[-1] == ("First sentence here.", ["d1"])  # checked alone, citing what the stream cited so far
    assert gate.event(s, "text", "ond has a secret. Third one is fine. [2]") == []
    assert gate.released(s) == "First sentence here. "  # the flagged sentence and all after it are held
    assert gate.event(s, "text", " Fourth. Fifth.") == []


def test_the_last_sentence_waits_and_a_retry_holds_the_rest():
    gate, s = SentenceGate([Secret()]), QueryState("q")
    gate.event(s, "sources", "[]")
    assert gate.event(s, "text", "Only one sentence so far.") == []  # not complete until the next begins
    assert gate.event(s, "retry", "the backend failed; retrying") == []
    assert gate.event(s, "text", " Another one. And more.") == []


def test_a_guard_that_redacts_or_is_not_per_sentence_holds_the_stream_whole():
    class Pipe:
        def __init__(self, checks, escalate_to=None):
            from ragcost.stages.guard import GuardStage

            st = object.__new__(GuardStage)  # the stage's own rule, without building its checks from YAML
            st.params = type("P", (), {"on": "answer", "escalate_to": escalate_to})()
            st.checks = checks
            self._st = [st]

        def stages(self):
            return self._st

    class Whole(Guard):
        name = "whole"

        def check(self, batch, on):
            return [[] for _ in batch]

    assert SentenceGate.of(Pipe([(Secret(), "block")])) is not None
    assert SentenceGate.of(Pipe([(Secret(), "redact")])) is None
    assert SentenceGate.of(Pipe([(Whole(None), "block")])) is None
    assert SentenceGate.of(Pipe([(Secret(), "block")], escalate_to="large")) is None
    assert SentenceGate.of(Pipe([(Secret(), "flag")])) is None  # nothing blocks: not held at all


def test_a_served_stream_releases_its_first_sentence_before_the_answer_ends(kb_served):
    p = variant(kb_served, "gated.yaml", stages=[
        {"type": "retrieve", "k": 3}, {"type": "generate", "backend": "slow-words", "sentences": 3},
        {"type": "guard", "on": "answer", "checks": [{"check": "mentions", "word": "zebra", "policy": "block"}]},
    ], serve={"batch_window_ms": 5, "keys": "file:keys.json"})
    q = {"model": "kb", "messages": [{"role": "user", "content": "refund invoice billing"}]}
    with ServerThread(p) as s:
        assert s.service.batcher.gate is not None
        plain = httpx.post(s.url + "/v1/chat/completions", headers=ACME, json=q, timeout=60).json()
        t0, got = time.monotonic(), []
        with httpx.stream("POST", s.url + "/v1/chat/completions", headers=ACME, json={**q, "stream": True}, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    e = json.loads(line[6:])
                    piece = e["choices"][0]["delta"].get("content") if e.get("choices") else None
                    if piece:
                        got.append((time.monotonic() - t0, piece))
    answer = plain["choices"][0]["message"]["content"]
    assert "".join(x for _, x in got) == answer and len(got) >= 2
    assert got[-1][0] - got[0][0] > 0.2  # the first sentence left while the rest was still being generated
