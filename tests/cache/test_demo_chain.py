"""A cache in front of retrieve -> rerank -> generate: checks compare like with like, and a hit is a full answer."""

from __future__ import annotations

import json

import pytest

from ragcost.records import QueryState
from tests.cache.conftest import pipeline
from tests.cache.test_stage import ask
from tests.cli.conftest import run_cli, write_pipeline

# The demo's shape: retrieve wide, re-rank to a few, answer from those.
CHAIN = [{"type": "cache"}, {"type": "retrieve", "k": 8}, {"type": "rerank", "backend": "rescore", "top_n": 3},
         {"type": "generate", "backend": "extractive"}, {"type": "cache_write"}]
Q = "How do I reset my password?"


@pytest.fixture
def chain(kb_folder):
    pipe = pipeline(kb_folder, stages=CHAIN)
    pipe.warm_up()
    pipe.stage("cache").handle.clear()
    yield pipe
    pipe.close()


def _hit_fields(s: QueryState) -> list[tuple]:
    return [(h.doc_id, h.chunk_no, h.title, h.text, h.metadata) for h in s.hits]


class TestBehindARerank:
    def test_the_check_reruns_the_stages_that_shaped_the_stored_hits(self, chain):
        v = chain.stage("cache").handle.verifier
        assert v.names == ["retrieve", "rerank"]

    def test_a_repeat_and_a_paraphrase_hit(self, chain):
        first = ask(chain, Q, k=8)
        assert first.cache is None and len(first.hits) == 3
        again = ask(chain, "how do I reset my password", k=8)  # no "?": another embedding, checked
        para = ask(chain, "How can I reset my password?", k=8)
        exact = ask(chain, Q, k=8)
        assert exact.cache["tier"] == "exact"
        for s in (again, para):
            assert s.cache is not None and s.cache["tier"] == "semantic" and s.cache["verified"] is True, s.cache_trip
            assert s.answer == first.answer

    def test_a_near_miss_sharing_the_documents_misses(self, chain):
        ask(chain, Q, k=8)
        near = ask(chain, "How do I not reset my password?", k=8)
        assert near.cache is None and near.cache_trip["refused"][0]["family"] == "negation"


class TestAHitIsAFullAnswer:
    def test_hits_strategy_and_citations_are_the_fresh_answers(self, chain):
        fresh = ask(chain, Q, k=8)
        hit = ask(chain, Q, k=8)
        assert hit.cache["tier"] == "exact"
        assert _hit_fields(hit) == _hit_fields(fresh) and all(h.title and h.text for h in hit.hits)
        assert hit.citations == fresh.citations and hit.answer == fresh.answer
        assert hit.strategy == fresh.strategy is not None

    def test_query_json_and_the_ledger_say_it_was_a_hit(self, kb_folder, capsys):
        path = write_pipeline(kb_folder, stages=CHAIN)
        pipe = pipeline(kb_folder, stages=CHAIN)
        pipe.warm_up()
        pipe.stage("cache").handle.backend.clear()
        pipe.close()
        code, out, err = run_cli(capsys, "query", path, Q, "--json")
        assert code == 0, err
        first = json.loads(out)["queries"][0]
        code, out, err = run_cli(capsys, "query", path, Q, "--json")
        second = json.loads(out)["queries"][0]
        assert first["cache"] == {"tier": "miss", "similarity": None, "verified": False}
        assert second["cache"] == {"tier": "exact", "similarity": 1.0, "verified": False}
        assert second["hits"] == first["hits"] and second["strategy"] == first["strategy"]
        assert second["citations"] == first["citations"]

    def test_the_session_answer_carries_the_cache_field(self, kb_folder):
        from ragcost.runtime.api import Session

        path = write_pipeline(kb_folder, stages=CHAIN)
        sess = Session(path, write_ledger=False)
        try:
            sess.warm_up()
            sess.pipe.stage("cache").handle.clear()
            a = sess.query(Q).to_json()
            b = sess.query(Q).to_json()
        finally:
            sess.close()
        assert a["cache"]["tier"] == "miss" and b["cache"] == {"tier": "exact", "similarity": 1.0, "verified": False}
        assert b["hits"] == a["hits"] and b["hits"][0]["title"] and b["strategy"] == a["strategy"]
