"""abstain_unknown: a question whose terms the corpus never uses is answered "no answer" without calling a backend."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from ragcost.generate.abstain import NO_ANSWER
from ragcost.generate.vocabulary import Vocabulary, load_or_build, of_texts
from tests.generate.helpers import HITS, book, book_path, run_stage  # noqa: F401

TEXTS = [f"{h.title}\n{h.text}" for h in HITS] + ["Padding and merging are related: dict entries mangled by names."]


class FakeStore:
    """The two things the vocabulary reads from a store: its revision and the chunks' texts (counted)."""

    def __init__(self, texts=TEXTS, revision="a" * 64):
        self.texts, self.rev, self.reads = list(texts), revision, 0

    def revision(self):
        return self.rev

    def chunk_column(self, name):
        assert name == "text"
        self.reads += 1
        return list(range(len(self.texts))), list(self.texts)


@pytest.fixture
def ctx(book, tmp_path):
    store = FakeStore()
    return SimpleNamespace(resource="cpu", price_book=book, path=tmp_path / "p.yaml", base=tmp_path,
                           index_dir=tmp_path / "index", store=lambda: store, fake=store)


class TestVocabulary:
    def test_inflections_are_known_and_other_terms_are_not(self):
        v = of_texts(TEXTS)
        for w in ("refund", "refunds", "relate", "dicts", "mangle", "pad", "merge", "billing"):
            assert v.known(w), w
        for w in ("javascript", "numpy", "kubernetes", "bitcoin"):
            assert not v.known(w), w

    def test_a_long_word_one_edit_from_a_corpus_word_is_a_typo_not_a_term(self):
        v = of_texts(["customers ask for a refund; invoices are files; floating point literals"])
        for typo in ("floting", "flaoting", "custmers", "invoicse", "literlas"):  # dropped, swapped, changed letters
            assert v.known(typo), typo
        assert not v.known("flotng") and not v.known("rfnd")  # two edits away; a short word is not corrected

    def test_unknown_counts_the_content_words_only(self):
        unknown, n = of_texts(TEXTS).unknown("How do I get a refund in bitcoin on Kubernetes?")
        assert unknown == ["bitcoin", "get", "kubernetes"] and n == 4  # how, do, i, a, in, on: stop or one-letter words

    def test_an_empty_corpus_knows_nothing_and_an_empty_question_has_no_words(self):
        assert Vocabulary([]).unknown("refund policy") == (["policy", "refund"], 2)
        assert of_texts(TEXTS).unknown("how do I ?") == ([], 0)


class TestKeptBesideTheIndex:
    def test_built_once_then_loaded_and_rebuilt_for_another_revision(self, ctx):
        v, line = load_or_build(ctx)
        path = ctx.index_dir / f"vocabulary-{'a' * 16}.json"
        assert line and f"{len(v):,} words of {len(TEXTS)} chunks" in line and path.is_file()
        again, line2 = load_or_build(ctx)
        assert line2 == f"{len(v):,} words, kept -> {path}" and again.words == v.words and ctx.fake.reads == 1  # loaded: the store's texts not read
        ctx.fake.rev, ctx.fake.texts = "b" * 64, ["a brand new corpus about kubernetes"]
        new, line3 = load_or_build(ctx)
        assert line3 and new.known("kubernetes") and not new.known("refund")
        assert not path.exists() and (ctx.index_dir / f"vocabulary-{'b' * 16}.json").is_file()  # the old revision's is gone

    def test_an_index_folder_it_cannot_write_keeps_it_in_memory(self, ctx, tmp_path):
        (tmp_path / "a-file").write_text("x")
        ctx.index_dir = tmp_path / "a-file" / "index"  # under a file: the folder cannot be made
        v, line = load_or_build(ctx)
        assert v.known("refund") and ", not kept (" in line

    def test_a_damaged_file_is_built_again(self, ctx):
        load_or_build(ctx)
        path = ctx.index_dir / f"vocabulary-{'a' * 16}.json"
        path.write_text('{"format": 1, "corpus_rev')
        v, line = load_or_build(ctx)
        assert line and v.known("refund") and json.loads(path.read_text())["corpus_revision"] == "a" * 64


def _stage(ctx, **params):
    from ragcost.stages.generate import Generate

    st = Generate(Generate.Params(**params), ctx)
    st.warm_up()
    return st


class TestTheStage:
    def _state(self, text):
        from ragcost.records import QueryState

        return QueryState(text=text, id="q", hits=list(HITS))

    def test_a_question_about_what_the_corpus_never_names_abstains_without_an_attempt(self, ctx):
        st = _stage(ctx, abstain_unknown=0.25)
        off, on = self._state("How do I get a refund in bitcoin on Kubernetes?"), self._state("Can I get a refund within 30 days?")
        events = []
        st.on_event = lambda s, kind, payload: events.append((s.text[:6], kind, payload))
        _, attempts = run_stage(st, [off, on])
        assert off.answer == NO_ANSWER and off.citations == [] and off.generation["abstained"]
        assert off.generation["unknown_terms"] == ["bitcoin", "get", "kubernetes"]
        assert off.generation["attempts"] == 0 and all(s is not off for s, _ in attempts)  # no backend, no $
        assert ("How do", "text", NO_ANSWER) in events
        assert on.answer != NO_ANSWER and on.citations and not on.generation["abstained"]  # 1 of 5 unknown
        assert any(s is on for s, _ in attempts)

    def test_the_share_is_the_threshold(self, ctx):
        q = "How do I get a refund in bitcoin on Kubernetes?"  # 3 of 4 content words unknown
        assert _stage(ctx, abstain_unknown=0.75)._unknown_terms(self._state(q)) == ["bitcoin", "get", "kubernetes"]
        assert _stage(ctx, abstain_unknown=0.8)._unknown_terms(self._state(q)) is None

    def test_off_by_default_reads_no_vocabulary(self, ctx):
        st = _stage(ctx)
        assert st.prepare() is None and ctx.fake.reads == 0
        _, attempts = run_stage(st, [self._state("How do I get a refund in bitcoin on Kubernetes?")])
        assert attempts and ctx.fake.reads == 0

    def test_index_time_prepare_keeps_it_and_says_so(self, ctx):
        line = _stage(ctx, abstain_unknown=0.25).prepare()  # warm-up built it; index time finds it kept
        assert line.startswith("vocabulary for abstain_unknown, ") and "words, kept -> " in line and ctx.fake.reads == 1

    @pytest.mark.parametrize("bad", [0, 1.5, -0.1])
    def test_a_share_outside_zero_to_one_is_refused(self, bad):
        from ragcost.stages.generate import Generate

        with pytest.raises(ValidationError, match="abstain_unknown"):
            Generate.Params(abstain_unknown=bad)
