"""The grounded check: stored vectors and verbatim spans give today's verdicts, each sentence's verdict is kept."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragcost.errors import FingerprintError
from ragcost.guards.grounded import GroundedGuard, normalised, sentences, wants_index_sentences
from ragcost.guards import sentence_vectors as sv
from ragcost.records import Hit, QueryState

REPO = Path(__file__).resolve().parents[2]
LABELLED = REPO / "bench" / "data" / "grounded_labelled.jsonl"
GROUNDED = {"check": "grounded", "cited_only": True}


def write_corpus(folder: Path, docs: dict[str, str]) -> Path:
    p = folder / "docs.jsonl"
    p.write_text("".join(json.dumps({"id": k, "title": "", "text": v}) + "\n" for k, v in docs.items()))
    return p


def pipeline(folder: Path, docs: dict[str, str], check: dict = GROUNDED):
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline

    cfg = {
        "name": "grounded_test", "store": f"duckdb:///{folder / 'store.duckdb'}", "index_dir": str(folder / "index"),
        "source": {"path": str(write_corpus(folder, docs)), "reader": "jsonl"},
        "chunking": {"size": 254, "overlap": 32, "title": "none"},
        "embed": {"model": "all-MiniLM-L6-v2", "batch_size": 16},
        "index": {"backend": "faiss", "kind": "flat"}, "pricing": str(REPO / "pricing" / "default.yaml"),
        "stages": [{"type": "retrieve", "k": 2}, {"type": "guard", "on": "answer", "checks": [check]}],
    }
    path = folder / "p.yaml"
    path.write_text(json.dumps(cfg))
    pipe = Pipeline.load(path)
    summary = run_index(pipe, prune=True)
    return pipe, summary


DOCS = {
    "refunds": "Customers can ask for a refund within 30 days of purchase. Refunds are paid to the card that was charged. "
               "A refund request needs the order number.",
    "shipping": "Orders ship from Rotterdam within two working days. Express delivery costs 12 euros inside the EU.",
}


def hits_of(pipe, ids=("refunds", "shipping")) -> list[Hit]:
    store = pipe.store()
    labels, docs = store.chunk_column("doc_id")
    rows = {r["doc_id"]: r for r in store.chunks(labels.tolist())}
    return [Hit(rows[d]["label"], d, 1.0, text=rows[d]["text"]) for d in ids]


def guard(pipe, **params) -> GroundedGuard:
    g = GroundedGuard(GroundedGuard.Params(cited_only=True, **params), pipe)
    g.warm_up()
    return g


def stamp_sentence_fingerprint(folder: Path, **fields: str) -> None:
    """Rewrite fields of the stored sentence vectors' fingerprint, as another build would have made them."""
    f = folder / "index" / "sentences" / "sentences.json"
    m = json.loads(f.read_text())
    m["fingerprint"].update(fields)
    f.write_text(json.dumps(m))


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    pipe, summary = pipeline(tmp_path_factory.mktemp("grounded"), DOCS)
    yield pipe, summary
    pipe.close()


class TestSentences:
    def test_a_verbatim_span_is_compared_without_case_spacing_quotes_or_citations(self):
        assert normalised("The  “with”\nstatement [2] Calls") == 'the "with" statement calls'

    def test_the_splitter_is_the_one_the_index_time_vectors_use(self):
        text = "First sentence here. Second one [1] is here too.\nA line"
        assert [t for _, _, t in sentences(text, 1)] == ["First sentence here.", "Second one is here too.", "A line"]

    def test_a_pipeline_asks_for_index_sentences_unless_the_check_says_query_or_reembed(self):
        assert wants_index_sentences(["grounded"]) and wants_index_sentences([GROUNDED])
        assert not wants_index_sentences([{**GROUNDED, "sentence_vectors": "query"}])
        assert not wants_index_sentences([{**GROUNDED, "mode": "reembed"}, "pii"])


class TestIndexTimeSentenceVectors:
    def test_index_embeds_every_sentence_once_beside_the_index(self, kb):
        pipe, summary = kb
        assert summary.sentences == 5 and summary.sentences_embedded == 5 and summary.sentence_bytes > 0
        idx = guard(pipe)._index_sentences()
        h = hits_of(pipe)[0]
        assert idx.chunk_hash(h.label) == sv.text_hash(h.text)
        vecs = idx.of_label(h.label, 12)
        direct = pipe.embedder.embed([t for _, _, t in sentences(h.text, 12)])
        assert vecs.shape == (3, 384) and np.allclose(vecs, direct, atol=1e-4)

    def test_a_changed_corpus_embeds_only_the_new_sentences(self, tmp_path):
        pipe, _ = pipeline(tmp_path, DOCS)
        pipe.close()
        pipe, summary = pipeline(tmp_path, {**DOCS, "new": "Gift cards cannot be refunded after they are used."})
        try:
            assert summary.sentences == 6 and summary.sentences_embedded == 1
        finally:
            pipe.close()

    def test_a_sentence_repeated_across_chunks_is_embedded_once_and_stored_for_each(self, tmp_path):
        class Counting:
            native_dim = 4
            seen: list[str] = []

            def embed(self, texts):
                self.seen.extend(texts)
                return np.array([[len(t), t.count("e"), 1.0, 0.0] for t in texts], np.float32)

        shared = "Refunds are paid to the card that was charged."
        texts = [f"A refund needs the order number. {shared}", f"{shared} Express delivery costs 12 euros."]
        emb = Counting()
        m = sv.build_sentence_vectors(tmp_path / "index", np.array([0, 1]), texts, emb, {"model_fingerprint": "c"}, "")
        assert m.sentences == 4 and m.embedded == 3 and sorted(emb.seen) == sorted(set(emb.seen))
        got = sv.open_sentence_vectors(tmp_path / "index", {"model_fingerprint": "c"}, "")
        a, b = got.of_label(0, 1), got.of_label(1, 1)
        assert np.array_equal(a[1], b[0]) and a[1][0] == len(shared)  # the repeat holds the shared sentence's vector

    def test_sentence_vectors_of_another_corpus_revision_are_refused_with_the_rebuild_command(self, tmp_path):
        pipe, _ = pipeline(tmp_path, DOCS)
        stamp_sentence_fingerprint(tmp_path, corpus_revision="0" * 64)
        try:
            with pytest.raises(FingerprintError, match=r"sentence vectors .* made for something else \(corpus_revision: 000000000000 -> .*ragcost index .*p\.yaml"):
                guard(pipe)
        finally:
            pipe.close()

    def test_sentence_vectors_of_another_embedder_are_refused(self, tmp_path):
        pipe, _ = pipeline(tmp_path, DOCS)
        stamp_sentence_fingerprint(tmp_path, model_fingerprint="f" * 64)
        try:
            with pytest.raises(FingerprintError, match=r"model_fingerprint: ffffffffffff -> .*never mixed in"):
                guard(pipe)
        finally:
            pipe.close()

    def test_a_damaged_vector_file_is_refused(self, tmp_path):
        pipe, _ = pipeline(tmp_path, DOCS)
        m = json.loads((tmp_path / "index" / "sentences" / "sentences.json").read_text())
        vec = tmp_path / "index" / "sentences" / m["files"]["vectors"]
        data = bytearray(vec.read_bytes())
        data[-1] ^= 0xFF
        vec.write_bytes(bytes(data))
        try:
            with pytest.raises(FingerprintError, match="missing or damaged"):
                guard(pipe)
        finally:
            pipe.close()


class TestVerdicts:
    ANSWER = ("Customers can ask for a refund within 30 days of purchase [refunds]. "
              "You may return an item within a month of buying it [refunds]. The moon is made of green cheese [refunds].")

    def state(self, pipe) -> QueryState:
        return QueryState(text="refund?", hits=hits_of(pipe), answer=self.ANSWER, citations=["refunds"])

    def test_each_sentence_has_a_verdict_naming_the_passage_that_supports_it(self, kb):
        pipe, _ = kb
        s = self.state(pipe)
        [found] = guard(pipe).check([s], "answer")
        v = s.notes["grounded"]
        assert [x["supported"] for x in v] == [True, True, False]
        assert [x["via"] for x in v] == ["verbatim", "sentence", None]
        assert v[0]["doc_id"] == v[1]["doc_id"] == "refunds" and v[0]["hit"] == 0
        assert set(v[0]) == {"sentence", "span", "supported", "score", "hit", "doc_id", "via"}
        assert self.ANSWER[slice(*v[2]["span"])].startswith("The moon")
        assert [f.match for f in found] == ["The moon is made of green cheese."]

    def test_a_verbatim_sentence_is_settled_without_a_model(self, kb):
        pipe, _ = kb
        g = guard(pipe)
        s = QueryState(text="q", hits=hits_of(pipe), answer="Customers can ask for a refund within 30 days of purchase [refunds].",
                       citations=["refunds"])
        calls = []
        real = pipe.embedder.embed
        pipe.embedder.embed = lambda texts: calls.append(texts) or real(texts)
        try:
            assert g.check([s], "answer") == [[]]
        finally:
            pipe.embedder.embed = real
        assert calls == [] and g.stage_notes()["verbatim"] == 1 and g.stage_notes()["embedded"] == 0

    def test_stored_vectors_index_or_not_say_what_re_embedding_says(self, kb, tmp_path):
        pipe, _ = kb
        old = [x["supported"] for x in self._verdicts(guard(pipe, mode="reembed"), pipe)]
        new = self._verdicts(guard(pipe), pipe)
        assert old == [x["supported"] for x in new] == [True, True, False]
        g = guard(pipe, sentence_vectors="query")
        assert [x["supported"] for x in self._verdicts(g, pipe)] == old
        assert g.stage_notes()["sentences_embedded"] == 3 and "sentences_index" not in g.stage_notes()
        # an index built without sentence vectors: the default check still runs, embedding on first use
        bare, _ = pipeline(tmp_path, DOCS, check={**GROUNDED, "sentence_vectors": "query"})
        try:
            assert not (tmp_path / "index" / "sentences").exists()
            g = guard(bare)
            assert [x["supported"] for x in self._verdicts(g, bare)] == old
            assert g.stage_notes()["sentences_embedded"] == 3 and g.stage_notes()["passages_stored"] == 1
        finally:
            bare.close()

    def test_an_answer_that_abstains_is_not_checked_as_a_claim(self, kb):
        from ragcost.generate.abstain import NO_ANSWER

        pipe, _ = kb
        s = QueryState(text="what is the capital of France?", hits=hits_of(pipe), answer=NO_ANSWER, citations=[])
        s.generation = {"abstained": True}
        assert guard(pipe).check([s], "answer") == [[]]
        assert "grounded" not in s.notes  # no verdicts: nothing was claimed
        # the same sentence from an answer that did not abstain is checked (and unsupported here)
        t = QueryState(text="q", hits=hits_of(pipe), answer=NO_ANSWER, citations=["refunds"])
        [found] = guard(pipe).check([t], "answer")
        assert [f.match for f in found] == [NO_ANSWER]

    def _verdicts(self, g, pipe):
        s = self.state(pipe)
        g.check([s], "answer")
        return s.notes["grounded"]

    def test_a_passage_whose_text_is_not_the_stored_chunks_is_embedded_not_looked_up(self, kb):
        pipe, _ = kb
        h = hits_of(pipe)[0]
        redacted = Hit(h.label, "refunds", 1.0, text="Customers can ask for a refund within <NUMBER> days.")
        s = QueryState(text="q", hits=[redacted], answer="The shop ships express inside the EU for a fee [refunds].", citations=["refunds"])
        g = guard(pipe)
        g.check([s], "answer")
        notes = g.stage_notes()
        assert notes["passages_embedded"] == 1 and "passages_stored" not in notes and "sentences_index" not in notes


@pytest.mark.skipif(not LABELLED.is_file(), reason="python -m bench.grounded_set writes the labelled set")
class TestLabelledSet:
    def test_it_holds_at_least_200_sentences_of_both_corpora_and_labels(self):
        items = [json.loads(x) for x in LABELLED.read_text().splitlines()]
        assert len(items) >= 200
        assert {it["corpus"] for it in items} == {"pydoc", "scifact"}
        kinds = {it["kind"] for it in items}
        assert {"verbatim", "reworded", "negated", "number_changed", "other_document", "hand"} <= kinds
        assert 0.3 < sum(it["label"] == "unsupported" for it in items) / len(items) < 0.7

    @pytest.mark.slow
    def test_the_new_check_gives_the_old_verdicts_on_a_sample(self, tmp_path):
        from bench.guards import flagged, labelled_pipeline

        items = [json.loads(x) for x in LABELLED.read_text().splitlines()]
        passages = list(dict.fromkeys(it["passage_id"] for it in items))[::10]  # every 10th passage: both corpora
        items = [it for it in items if it["passage_id"] in passages]  # ... with every sentence about it
        assert len(items) >= 25 and {it["corpus"] for it in items} == {"pydoc", "scifact"}
        pipe, labels = labelled_pipeline(items, tmp_path)
        try:
            old, _ = flagged(guard(pipe, mode="reembed"), items, labels)
            new, _ = flagged(guard(pipe), items, labels)
        finally:
            pipe.close()
        assert sum(a == b for a, b in zip(old, new)) / len(items) >= 0.99
