"""The cache and cache_write stages end to end on DuckDB: hits, isolation, invalidation, load-time refusals."""

from __future__ import annotations

import json

import re
import time

import pytest

from ragcost.errors import ConfigError
from ragcost.records import QueryState
from tests.cache.conftest import CACHED, pipeline, stages
from tests.cli.conftest import write_corpus, write_pipeline

Q = "How do I reset my password?"


def ask(pipe, text=Q, tenant=None, filter_=None, k=3):
    pipe.warm_up()
    s = QueryState(text=text, id="q", k=k, tenant=tenant, filter=filter_)
    pipe.run([s])
    return s


@pytest.fixture
def fresh(kb_folder):
    """The module's pipeline with an empty cache."""
    pipe = pipeline(kb_folder, stages=CACHED)
    pipe.warm_up()
    pipe.stage("cache").handle.backend.clear()
    yield pipe
    pipe.close()


class TestHits:
    def test_a_repeat_is_an_exact_hit_with_the_same_answer_and_a_ledger_outcome(self, fresh):
        first = ask(fresh)
        again = ask(fresh, "  how do I RESET my   password?")
        assert first.cache is None and first.outcome == "continued"
        assert again.cache["tier"] == "exact" and again.outcome == "finished" and again.outcome_stage == "cache"
        assert again.answer == first.answer and again.citations == first.citations
        assert [h.doc_id for h in again.hits] == [h.doc_id for h in first.hits]

    def test_same_text_once_normalised_but_a_different_embedding_is_checked_not_trusted(self, fresh):
        ask(fresh)
        bare = ask(fresh, "how do I reset my password")  # no "?": another embedding, so not an exact hit
        assert bare.cache is None or (bare.cache["tier"] == "semantic" and bare.cache["verified"])
        assert bare.cache_trip["candidate"]["similarity"] < 0.9999

    def test_a_paraphrase_is_served_only_after_a_fresh_retrieval_agrees(self, fresh):
        ask(fresh)
        para = ask(fresh, "How can I reset my password?")
        cand = para.cache_trip.get("candidate")
        assert cand is not None and cand["similarity"] > 0.8
        if para.cache is not None:  # thin evidence: every semantic hit is verified
            assert para.cache["tier"] == "semantic" and para.cache["verified"] is True

    def test_a_rewording_that_adds_a_weighty_word_is_refused_before_any_check(self, fresh):
        ask(fresh)
        para = ask(fresh, "How can I reset the password of my account?")
        assert para.cache is None and "candidate" not in para.cache_trip
        assert para.cache_trip["refused"][0]["family"] == "content" and "account" in para.cache_trip["refused"][0]["words"]

    def test_a_misspelt_question_is_looked_up_and_checked_as_the_corpus_spells_it(self, fresh):
        first = ask(fresh)
        typo = ask(fresh, "How do I reset my pasword?")
        assert typo.cache_trip["corrected"] == [["pasword", "password"]]
        assert typo.cache is not None and typo.cache["tier"] == "semantic" and typo.cache["verified"] is True
        assert typo.answer == first.answer and typo.cache_record()["corrected"] == [["pasword", "password"]]

    def test_without_typo_correction_the_misspelt_question_misses(self, kb_folder):
        pipe = pipeline(kb_folder, stages=[{"type": "cache", "correct_typos": False}, *CACHED[1:]])
        pipe.warm_up()
        pipe.stage("cache").handle.backend.clear()
        try:
            ask(pipe)
            typo = ask(pipe, "How do I reset my pasword?")
            assert typo.cache is None and "corrected" not in typo.cache_trip
        finally:
            pipe.close()

    def test_a_different_question_is_a_miss(self, fresh):
        ask(fresh)
        other = ask(fresh, "What are the API rate limits?")
        assert other.cache is None and other.outcome == "continued"


class TestIsolation:
    def test_tenant_b_never_gets_tenant_a_answer_for_identical_text(self, fresh):
        ask(fresh, tenant="acme")
        assert ask(fresh, tenant="acme").cache["tier"] == "exact"
        b = ask(fresh, tenant="globex")
        assert b.cache is None and "candidate" not in b.cache_trip

    def test_another_filter_is_another_scope(self, fresh):
        ask(fresh, filter_={"tenant": "acme"})
        b = ask(fresh, filter_={"tenant": "globex"})
        assert b.cache is None and "candidate" not in b.cache_trip


class TestInvalidation:
    def test_a_changed_prompt_template_or_k_serves_no_stale_entry(self, kb_folder, fresh):
        ask(fresh)
        for changed in (stages(template="Answer briefly.\n{context}\n\nQ: {question}"), stages(sentences=1)):
            other = pipeline(kb_folder, stages=changed)
            try:
                assert ask(other).cache is None
            finally:
                other.close()
        assert ask(fresh, k=2).cache is None

    def test_an_edited_document_serves_no_stale_entry(self, tmp_path):
        from ragcost.runtime.indexing import run_index
        from tests.cli.conftest import DOCS

        write_corpus(tmp_path / "kb.jsonl")
        path = write_pipeline(tmp_path, stages=CACHED)
        pipe = pipeline(tmp_path, stages=CACHED)
        run_index(pipe)
        ask(pipe)
        assert ask(pipe).cache["tier"] == "exact"
        pipe.close()
        edited = [d if d[0] != "kb-2" else (*d[:2], d[2] + " Passwords expire after 90 days.", *d[3:]) for d in DOCS]
        write_corpus(tmp_path / "kb.jsonl", edited)
        pipe = pipeline(tmp_path, stages=CACHED)
        run_index(pipe)
        try:
            assert ask(pipe).cache is None
            assert ask(pipe).cache["tier"] == "exact"  # the new revision's entry
        finally:
            pipe.close()
        assert path.exists()

    def test_changed_model_or_tokenizer_files_change_every_key(self, kb_folder, tmp_path):
        from ragcost.stages.cache import pipeline_stages, versions_of

        class Ctx:  # what versions_of reads, with the embedder's file hash under test
            def __init__(self, fp, base):
                self.fp, self.base = fp, base

            @property
            def embedder(self):
                return self

            def fingerprint(self):
                return self.fp

            def artifact(self):
                return type("A", (), {"manifest": type("M", (), {"fingerprint": {"corpus_revision": "r1"}})()})()

        st = pipeline_stages(write_pipeline(tmp_path, stages=stages(backend="extractive", tokenizer="tok.json")))
        (tmp_path / "tok.json").write_text("{}")
        a = versions_of(Ctx("weights-1", tmp_path), st)
        assert versions_of(Ctx("weights-2", tmp_path), st) != a  # model weights (or its tokenizer) hashed
        (tmp_path / "tok.json").write_text('{"added": 1}')
        assert versions_of(Ctx("weights-1", tmp_path), st) != a  # the generator's tokenizer file

    def test_the_stage_reads_its_pipeline_from_the_context_as_the_file_says_it(self, tmp_path):
        """The cache's version digest comes from ``ctx.stage_params()`` (not the file read again): the same params,
        defaults filled in, so entries written before stay valid; the handle a cache_write uses is the context's."""
        from ragcost.runtime.pipeline import Pipeline
        from ragcost.stages.cache import pipeline_stages

        write_corpus(tmp_path / "kb.jsonl")
        path = write_pipeline(tmp_path, stages=stages(backend="extractive"))
        pipe = Pipeline.load(path)
        try:
            assert pipe.stage_params() == pipeline_stages(path)
            other = Pipeline.load(path)
            assert pipe.shared() is not other.shared()  # two pipelines in one process never share a cache handle
            other.close()
        finally:
            pipe.close()


class TestRefusedAtLoad:
    def test_a_cache_after_generate_is_refused_with_file_and_line(self, kb_folder, tmp_path):
        from ragcost.runtime.load import load_pipeline

        bad = write_pipeline(tmp_path, stages=[CACHED[1], CACHED[2], CACHED[0], CACHED[3]])
        with pytest.raises(ConfigError, match=r"kb\.yaml:\d+:\d+: stages\.2: 'cache' after generate"):
            load_pipeline(bad)

    def test_a_false_hit_bound_of_one_is_refused_with_file_and_line(self, tmp_path):
        from ragcost.runtime.load import load_pipeline

        bad = write_pipeline(tmp_path, stages=[{"type": "cache", "max_false_hit_rate": 1}, *CACHED[1:]])
        with pytest.raises(ConfigError, match=r"kb\.yaml.*max_false_hit_rate must be in \(0, 1\)"):
            load_pipeline(bad)

    def test_a_cache_without_cache_write_says_how_to_fix_it(self, kb_folder):
        pipe = pipeline(kb_folder, stages=CACHED[:3])
        with pytest.raises(ConfigError, match=r"no cache_write stage after it.*add \{type: cache_write"):
            pipe.warm_up()
        pipe.close()


class TestRedis:
    def test_a_restart_during_a_run_degrades_to_misses_never_errors(self, kb_folder, own_redis):
        pipe = pipeline(kb_folder, stages=[{"type": "cache", "backend": "redis", "url": own_redis.url, "refresh_s": 0}, *CACHED[1:]])
        try:
            ask(pipe)
            assert ask(pipe).cache["tier"] == "exact"
            own_redis.stop()
            with pytest.warns(RuntimeWarning, match=re.escape(own_redis.url) + ".*continuing uncached"):
                down = ask(pipe)
            assert down.cache is None and down.ok and down.answer
            own_redis.start()  # back, empty (no persistence): answers again, and writes again
            assert ask(pipe, "What are the API rate limits?").ok
            assert pipe.stage("cache").handle.backend.stats(time.time())["entries"] >= 1
        finally:
            pipe.close()

    def test_unreachable_at_start_warns_with_the_url_and_answers_uncached(self, kb_folder):
        pipe = pipeline(kb_folder, stages=[{"type": "cache", "backend": "redis", "url": "redis://127.0.0.1:1/0"}, *CACHED[1:]])
        try:
            with pytest.warns(RuntimeWarning, match=r"cache redis://127\.0\.0\.1:1/0: .*continuing uncached"):
                pipe.warm_up()
            s = ask(pipe)
            assert s.cache is None and s.ok and s.answer
        finally:
            pipe.close()


def test_a_redacted_query_is_cached_under_its_redacted_text_only(kb_folder):
    guarded = [{"type": "guard", "on": "query", "checks": ["pii"], "policy": "redact"}, *CACHED]
    pipe = pipeline(kb_folder, stages=guarded)
    try:
        pipe.warm_up()
        h = pipe.stage("cache").handle
        h.backend.clear()
        s = ask(pipe, "I am jane.doe@example.com, how do I reset my password?")
        assert "jane.doe@example.com" not in s.text
        stored = h.backend.entries_since(0, time.time())
        assert len(stored) == 1 and "jane" not in stored[0].payload() and "example.com" not in stored[0].payload()
        again = ask(pipe, "I am john@example.org, how do I reset my password?")  # another address, same redacted text
        assert again.cache is not None and "john" not in again.text
    finally:
        pipe.close()


def test_ragcost_query_answers_a_repeat_from_the_cache_and_the_ledger_says_so(kb_folder):
    """`ragcost query`'s path (run_queries, ledger on): no server needed."""
    from ragcost.cost.ledger import Ledger
    from ragcost.runtime.query import run_queries

    pipe = pipeline(kb_folder, stages=CACHED)
    try:
        pipe.warm_up()
        pipe.stage("cache").handle.backend.clear()
        run_queries(pipe, [("q1", Q)])
        second = run_queries(pipe, [("q2", Q)])
        assert second.states[0].cache["tier"] == "exact"
        led = Ledger(pipe.config.store_url)
        try:
            queries, _ = led.read(pipeline="kb")
        finally:
            led.close()
        last = [q for q in queries if q.get("outcome_stage") == "cache"]
        assert last and last[-1]["outcome"] == "finished"
        hit = json.loads(last[-1]["cache"])  # the ledger says which tier and which entry answered
        assert hit["tier"] == "exact" and hit["entry"] == second.states[0].cache["entry"]
    finally:
        pipe.close()


def test_with_enough_verified_evidence_a_semantic_hit_is_served_without_a_retrieval(kb_folder):
    cfg = [{"type": "cache", "verify_share": 0, "max_false_hit_rate": 0.01}, *CACHED[1:]]
    pipe = pipeline(kb_folder, stages=cfg)
    try:
        pipe.warm_up()
        h = pipe.stage("cache").handle
        h.backend.clear()
        ask(pipe)
        assert not h.learner.trusted("any", 0.99)  # no evidence yet: it would verify
        for _ in range(400):  # 0 wrong in 400 at similarity >= 0.9: Wilson upper 0.95% <= 1%
            h.learner.add("seeded", 0.9, True)
        s = ask(pipe, "how do I reset my password")
        assert s.cache["tier"] == "semantic" and s.cache["verified"] is False and s.cache["similarity"] >= 0.9
    finally:
        pipe.close()


def test_checks_are_stored_with_the_next_refresh_or_at_close_and_a_new_process_learns_from_them(kb_folder):
    """A verified hit writes nothing on its own path; the check reaches the backend in the refresh, or at close."""
    pipe = pipeline(kb_folder, stages=CACHED)
    try:
        pipe.warm_up()
        h = pipe.stage("cache").handle
        h.backend.clear()
        ask(pipe)
        s = ask(pipe, "how can I reset my password")
        assert s.cache is not None and s.cache["verified"] is True
        assert h.observed and len(h.backend.observations()) == 0  # held in memory so far
    finally:
        pipe.close()
    again = pipeline(kb_folder, stages=CACHED)
    try:
        again.warm_up()
        assert again.stage("cache").handle.learner.evidence >= 1
    finally:
        again.close()


def test_when_the_nearest_entry_fails_its_check_a_next_one_the_same_retrieval_confirms_answers(kb_folder):
    """One fresh retrieval checks the nearest cached query and, if it is wrong, the next ones (no extra call)."""
    from ragcost.cache import CacheEntry

    pipe = pipeline(kb_folder, stages=CACHED)
    try:
        pipe.warm_up()
        h = pipe.stage("cache").handle
        h.backend.clear()
        right = ask(pipe)  # cached: the password question and its basis
        other = ask(pipe, "Where do I download invoices?")
        text = "how can I reset my password"
        probe = QueryState(text=text, id="p", k=3)
        now = time.time()
        decoy = CacheEntry(scope=h.scope_of(probe), key="decoy", text=text, vector=pipe.embedder.embed([text])[0],
                           answer="the invoices answer", citations=list(other.citations),
                           hits=[{"label": x.label, "doc_id": x.doc_id, "score": x.score} for x in other.hits],
                           created_at=now, expires_at=now + 60)
        h.remember(decoy)  # the nearest (similarity 1.0), with another question's basis
        s = ask(pipe, text)
        assert s.cache_trip["candidate"]["entry"] == decoy.id and s.cache_trip["candidate"]["correct"] is False
        assert s.cache is not None and s.cache["alternate"] is True and s.cache["verified"] is True
        assert s.answer == right.answer and s.cache["entry"] != decoy.id
        assert s.cache_record()["correct"] is False  # the ledger keeps the nearest's check: it was wrong
    finally:
        pipe.close()
