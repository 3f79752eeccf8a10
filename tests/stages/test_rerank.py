"""The rerank stage: cross-encoder (a tiny local model), exact rescore, BM25 hybrid with RRF."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragcost.records import UsageRecord
from ragcost.errors import ConfigError
from ragcost.runtime.pipeline import Pipeline
from ragcost.records import Hit, QueryState
from ragcost.stages.rerank import Rerank
from ragcost.stages.rerank.hybrid import Tokenizer, build_bm25, names_exact_terms, rrf
from tests.cli.conftest import write_corpus, write_pipeline

IVFPQ = {"backend": "faiss", "kind": "ivf_pq", "build": {"nlist": 2, "m": 8, "nbits": 4}, "search": {"nprobe": 1}}


def tiny_cross_encoder(folder: Path, tokenizer_path: str) -> Path:
    """A 2-layer BERT with one output, saved with the MiniLM tokenizer: tests loading, batching, ordering."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tok = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, num_labels=1, max_position_embeddings=128)
    BertForSequenceClassification(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory, minilm_path) -> Path:
    return tiny_cross_encoder(tmp_path_factory.mktemp("ce"), minilm_path)


def indexed(folder: Path, **overrides) -> Pipeline:
    from ragcost.runtime.indexing import run_index

    write_corpus(folder / "kb.jsonl")
    pipe = Pipeline.load(write_pipeline(folder, **overrides))
    run_index(pipe)
    return pipe


@pytest.fixture(scope="module")
def truncated_pq(tmp_path_factory) -> Pipeline:
    """IVF-PQ over 128 of MiniLM's 384 dimensions: approximate, truncated, with full vectors in the store."""
    pipe = indexed(tmp_path_factory.mktemp("pq"), index=IVFPQ, embed={"model": "all-MiniLM-L6-v2", "dim": 128, "batch_size": 16},
                   stages=[{"type": "retrieve", "k": 8}, {"type": "rerank", "backend": "rescore", "top_n": 3}])
    yield pipe
    pipe.close()


@pytest.fixture(scope="module")
def flat(tmp_path_factory) -> Pipeline:
    pipe = indexed(tmp_path_factory.mktemp("flat"), stages=[{"type": "retrieve", "k": 5}, {"type": "rerank", "backend": "hybrid"}],
                   useful={"threshold": 0.02})  # RRF scores: at most 2/61
    yield pipe
    pipe.close()


def retrieved(pipe: Pipeline, texts: list[str], k: int = 8, **kw) -> list[QueryState]:
    """States after the pipeline's embed and retrieve stages only."""
    states = [QueryState(text=t, id=str(i), k=k, **kw) for i, t in enumerate(texts)]
    for st in pipe.stages():
        if st.type in ("embed", "retrieve"):
            st.run(states, UsageRecord(stage=st.name, resource="cpu", items=len(states)))
    return states


class TestRerankParams:
    def test_unknown_backend_lists_the_known_ones(self):
        with pytest.raises(ValueError, match=r"unknown rerank backend 'colbert'; installed: cross-encoder, hybrid, rescore"):
            Rerank.Params(backend="colbert")

    def test_an_option_of_another_backend_is_refused(self):
        with pytest.raises(ValueError, match=r"backend 'rescore': model: unknown key.*known: top_n, source"):
            Rerank.Params(backend="rescore", model="./x")

    def test_cross_encoder_needs_a_model(self):
        with pytest.raises(ValueError, match=r"backend 'cross-encoder': model: required field is missing"):
            Rerank.Params()

    def test_a_bad_stage_in_pipeline_yaml_names_file_and_line(self, tmp_path):
        p = write_pipeline(tmp_path, stages=[{"type": "retrieve"}, {"type": "rerank", "backend": "hybrid", "rrf_k": 0}])
        with pytest.raises(ConfigError, match=r"kb\.yaml:\d+:\d+: stages\.1.*rrf_k"):
            Pipeline.load(p)

    def test_params_round_trip(self):
        p = Rerank.Params(backend="hybrid", sparse_k=50, top_n=5)
        again = Rerank.Params.model_validate(p.model_dump(exclude_none=True))
        assert again.backend_params() == p.backend_params()


class TestCrossEncoder:
    def test_scores_every_pair_in_batches_and_sorts(self, cross_encoder_dir):
        from sentence_transformers import CrossEncoder

        stage = Rerank(Rerank.Params(model=str(cross_encoder_dir), batch_size=4, top_n=3, device="cpu"), ctx=None)
        texts = ["refund policy", "reset my password", "api limits"]
        docs = ["Refunds within 30 days.", "Open the login page.", "100 requests per minute.", "Invoices as PDF.", "Status page."]
        batch = [QueryState(text=t, hits=[Hit(i, f"d{i}", 0.0, text=d) for i, d in enumerate(docs)]) for t in texts]
        usage = UsageRecord(stage="rerank", resource="cpu", items=3)
        stage.warm_up()
        stage.run(batch, usage)
        assert usage.notes["rerank"] == {"scored": 15, "batches": 4}  # ceil(15 / 4)
        raw = CrossEncoder(str(cross_encoder_dir), device="cpu").predict([(t, d) for t in texts for d in docs])
        for s, want in zip(batch, raw.reshape(3, 5)):
            assert len(s.hits) == 3
            assert [h.score for h in s.hits] == sorted(want.tolist(), reverse=True)[:3]
            assert [h.score for h in s.hits] == pytest.approx([want[int(h.doc_id[1:])] for h in s.hits], abs=1e-5)

    def test_a_missing_model_folder_says_nothing_is_downloaded(self, tmp_path):
        stage = Rerank(Rerank.Params(model=str(tmp_path / "nope")), ctx=None)
        with pytest.raises(ConfigError, match="not a local folder.*nothing is downloaded"):
            stage.warm_up()

    def test_in_a_pipeline_the_runner_times_and_prices_it(self, flat, cross_encoder_dir, tmp_path):
        pipe = Pipeline.load(write_pipeline(Path(flat.path).parent, stages=[
            {"type": "retrieve", "k": 4}, {"type": "rerank", "model": str(cross_encoder_dir), "top_n": 2, "batch_size": 3}]))
        res = pipe.run([QueryState(text="refund", k=4), QueryState(text="password", k=4)])
        call = next(c for c in res.calls if c.record.stage == "rerank:cross-encoder")
        assert call.record.notes["rerank"] == {"scored": 8, "batches": 3}
        assert call.record.wall_seconds > 0 and call.cost_usd > 0
        assert all(len(s.hits) == 2 for s in res.states)
        pipe.close()


class TestRescore:
    def test_scores_become_exact_full_dimension_cosines(self, truncated_pq):
        pipe = truncated_pq
        texts = ["how do I get my money back?", "rate limit of the public API"]
        res = pipe.run([QueryState(text=t, k=8) for t in texts])
        call = next(c for c in res.calls if c.record.stage == "rerank:rescore")
        assert call.record.notes["source"] == "store"
        assert "query_embedded" not in call.record.notes  # the embed stage handed the full vectors over
        q = pipe.embedder.embed(texts)
        assert q.shape[1] == 384 and pipe.dim == 128
        for s, qv in zip(res.states, q):
            assert len(s.hits) == 3
            vecs = pipe.store().vectors_for([h.label for h in s.hits])
            assert [h.score for h in s.hits] == pytest.approx([float(vecs[h.label] @ qv) for h in s.hits], abs=1e-5)
            assert [h.score for h in s.hits] == sorted((h.score for h in s.hits), reverse=True)
        assert call.record.notes["rerank"]["scored"] == sum(1 for _ in texts) * 8

    def test_rescore_keeps_the_exact_top_of_the_candidates(self, truncated_pq):
        pipe = truncated_pq
        states = retrieved(pipe, ["invoice download as PDF"], k=8)
        cands = [h.label for h in states[0].hits]
        for s in states:
            s.full_vector = None  # as if no embed stage ran before it
        stage = Rerank(Rerank.Params(backend="rescore", top_n=3), pipe)  # alone: embeds the query at full dim itself
        usage = UsageRecord(stage="rerank", resource="cpu", items=1)
        stage.run(states, usage)
        assert usage.notes["query_embedded"] == {"queries": 1}
        qv = pipe.embedder.embed(["invoice download as PDF"])[0]
        vecs = pipe.store().vectors_for(cands)
        exact = sorted(cands, key=lambda l: -float(vecs[l] @ qv))[:3]
        assert [h.label for h in states[0].hits] == exact

    def test_at_full_dimension_it_reads_the_artifacts_float32_vectors(self, flat):
        states = retrieved(flat, ["team members and roles"], k=5)
        usage = UsageRecord(stage="rerank", resource="cpu", items=1)
        Rerank(Rerank.Params(backend="rescore"), flat).run(states, usage)
        assert usage.notes["source"] == "artifact"
        art = flat.artifact()
        for h in states[0].hits:
            row = int(np.searchsorted(art.labels, h.label))
            assert h.score == pytest.approx(float(art.vectors[row] @ states[0].vector), abs=1e-5)


class TestHybrid:
    def test_rrf(self):
        fused = rrf([["a", "b", "c"], ["c", "a"]], k=60)
        assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
        assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
        assert fused["b"] == pytest.approx(1 / 62)

    def test_rrf_weights_each_ranking(self):
        fused = rrf([["a", "b"], ["b", "c"]], k=60, weights=[1.0, 0.5])
        assert fused["a"] == pytest.approx(1 / 61)
        assert fused["b"] == pytest.approx(1 / 62 + 0.5 / 61)
        assert fused["c"] == pytest.approx(0.5 / 62)
        assert rrf([["a"], ["b"]], weights=[1.0, 0.0])["b"] == 0.0

    @pytest.mark.parametrize("question", [
        "What does __exit__ return?", "Is str.strip in place?", "what is co_varnames", "When is NotImplemented returned?",
        "Why does ValueError happen?", "What does len() call?", "How does a[i] work?", "How do I slice with a[::2]?",
        "What does !r do in a format string?", "What is `yield from`?", "Why do I get HTTP 429?", "What does // do?",
        "What is x ** y?", "How does a @ b work?", "What does x += 1 do?", "What is the walrus := operator?",
        "What does 5 % 3 give?", "Is a != b the negation of ==?",
    ])
    def test_a_question_naming_code_or_a_number_has_exact_terms(self, question):
        assert names_exact_terms(question)

    @pytest.mark.parametrize("question", [
        "How do I skip the rest of the current loop iteration?", "What does the with statement do on an exception?",
        "What is the capital of France?", "How do the and, or and not operators evaluate?", "What's a lambda?",
        "How can an inner function rebind a variable of the function around it?", "Which values are false?",
        "Is it well-known?", "asdf qwerty zxcv", "",
    ])
    def test_a_question_in_plain_prose_has_none(self, question):
        assert not names_exact_terms(question)

    def test_prose_weight_applies_to_prose_questions_only(self, flat):
        prose = "which page announces outages and maintenance"
        states = retrieved(flat, [prose, "429"], k=2)
        dense = [[h.doc_id for h in s.hits] for s in states]
        Rerank(Rerank.Params(backend="hybrid", prose_weight=0.0), flat).run(states, UsageRecord(stage="rerank", resource="cpu", items=2))
        assert [h.doc_id for h in states[0].hits] == dense[0]  # BM25 has no vote on prose at weight 0: dense order
        assert "kb-5" in [h.doc_id for h in states[1].hits]  # a number keeps BM25's full vote

    @pytest.mark.parametrize("question, weight, shown_b", [
        ("What is __delete__?", 0.5, 6),  # names code: BM25's full vote, rank 1 beats dense's rank 2
        ("what does deleting do", 1.0, 6),
        ("what does deleting do", 0.5, 5),  # prose at half a vote: 0.5/61 < 1/62, dense's chunk
    ])
    def test_a_document_is_shown_by_the_chunk_of_the_list_that_gave_it_more(self, question, weight, shown_b):
        from ragcost.stages.rerank.hybrid import Hybrid, HybridParams

        hybrid = Hybrid(HybridParams(prose_weight=weight, top_n=2), ctx=None)
        hybrid._doc_of = {1: "A", 2: "A", 5: "B", 6: "B"}
        state = QueryState(text=question, id="q", k=2)
        state.hits = [Hit(1, "A", 0.9), Hit(5, "B", 0.8)]  # dense: A (chunk 1), then B (chunk 5)
        winners, _ = hybrid._fuse(state, (np.array([6, 2]), np.array([3.0, 1.0], np.float32)))  # BM25: B's chunk 6, A's 2
        shown = {k: (h if isinstance(h, int) else h.label) for k, h, _ in winners}
        assert shown["A"] == 1  # dense rank 1 beats BM25 rank 2: dense's chunk
        assert shown["B"] == shown_b

    def test_a_bm25_chunk_gone_from_the_store_falls_back_to_the_dense_hit(self):
        from types import SimpleNamespace

        from ragcost.stages.rerank.hybrid import Hybrid, HybridParams

        store = SimpleNamespace(chunks=lambda labels: [])  # both BM25 chunks went between search and read
        hybrid = Hybrid(HybridParams(top_n=3), ctx=SimpleNamespace(store=lambda: store))
        hybrid._index = SimpleNamespace(search=lambda texts, k, allowed: [(np.array([6, 9]), np.array([3.0, 2.0], np.float32))])
        hybrid._doc_of = {1: "A", 5: "B", 6: "B", 9: "C"}
        state = QueryState(text="What is __delete__?", id="q", k=3)
        state.hits = [Hit(1, "A", 0.9), Hit(5, "B", 0.8)]
        hybrid.rerank([state], UsageRecord(stage="rerank", resource="cpu", items=1))
        # B would be shown by BM25's chunk 6, which is gone: its dense chunk 5 instead; C had only BM25's, so it goes
        assert sorted((h.doc_id, h.label) for h in state.hits) == [("A", 1), ("B", 5)]

    def test_bm25_is_built_once_per_corpus_revision_beside_the_index(self, flat):
        a = build_bm25(flat)
        assert a.path.parent == flat.config.index_path and a.path.name.startswith("bm25-")
        stamp = (a.path / "ragcost-bm25.json").stat().st_mtime_ns
        b = build_bm25(flat)
        assert b.path == a.path and (b.path / "ragcost-bm25.json").stat().st_mtime_ns == stamp
        assert len(b.labels) == flat.store().count_chunks()

    def test_fusion_brings_in_a_keyword_match_dense_retrieval_missed(self, flat):
        query = "429"  # only kb-5 says "return 429"; a number means little to MiniLM
        states = retrieved(flat, [query], k=2)
        dense = [h.doc_id for h in states[0].hits]
        usage = UsageRecord(stage="rerank", resource="cpu", items=1)
        Rerank(Rerank.Params(backend="hybrid"), flat).run(states, usage)
        ids = [h.doc_id for h in states[0].hits]
        assert "kb-5" in ids and len(ids) == 2
        assert usage.notes["rerank"]["batches"] == 1
        if "kb-5" not in dense:
            assert ids[0] in dense or ids[0] == "kb-5"
        assert states[0].hits[0].score == pytest.approx(max(h.score for h in states[0].hits))

    def test_the_code_tokenizer_keeps_identifiers_operators_and_keywords(self):
        q = "Does the with statement call __exit__, str.lstrip or x ** 2 // 3 @ m?"
        words = Tokenizer()([q])[0]  # bm25s's pattern and English stop words: "with" is a stop word, "**" no token
        assert "with" not in words and "__exit__" in words and "**" not in words and "str.lstrip" not in words
        code = Tokenizer("code", "code")([q])[0]
        assert {"with", "__exit__", "str.lstrip", "str", "lstrip", "**", "//", "@", "x"} <= set(code)
        assert not {"does", "the"} & set(code)  # question words and English stop words go
        assert Tokenizer("code", "questions")([q])[0].count("with") == 0  # keywords are kept only by stopwords: code
        assert Tokenizer("words", "en", stem=True)(["calls literals __class__"])[0] == ["call", "literal", "__class__"]

    def test_an_operator_and_a_dotted_name_find_their_chunk(self, tmp_path):
        from ragcost.runtime.indexing import run_index

        texts = ["Floor division: the // operator rounds toward minus infinity.", "Use str.removeprefix to drop a prefix.",
                 "The division operator returns a float.", "A prefix of a string, and str objects in general."]
        with (tmp_path / "kb.jsonl").open("w") as f:
            for i, t in enumerate(texts):
                f.write(json.dumps({"id": f"d{i}", "title": f"d{i}", "text": t}) + "\n")
        pipe = Pipeline.load(write_pipeline(tmp_path, metadata={}))
        run_index(pipe)
        try:
            words, code = build_bm25(pipe), build_bm25(pipe, Tokenizer("code", "code"))
            assert words.path != code.path and words.path.exists()  # one folder per tokenizer
            assert len(words.search(["//"], 4)[0][0]) == 0  # no token: BM25 says nothing
            first = [[r["doc_id"] for r in pipe.store().chunks(lb)][0] for lb, _ in code.search(["what does // do", "str.removeprefix?"], 4)]
            assert first == ["d0", "d1"]
            assert [len(lb) for lb, _ in code.search(["what does the", "zzz"], 4)] == [0, 0]  # no corpus word: no hits, no error
        finally:
            pipe.close()

    def test_filters_hold_on_the_bm25_side(self, flat):
        states = retrieved(flat, ["billing invoices refund"], k=5, filter={"tenant": "initech"})
        Rerank(Rerank.Params(backend="hybrid", top_n=5), flat).run(states, UsageRecord(stage="r", resource="cpu", items=1))
        assert states[0].hits and all(h.metadata["tenant"] == "initech" for h in states[0].hits)

    def test_a_corpus_change_builds_a_new_bm25_and_removes_the_old(self, tmp_path):
        from ragcost.runtime.indexing import run_index

        pipe = indexed(tmp_path)
        old = build_bm25(pipe).path
        with (tmp_path / "kb.jsonl").open("a") as f:
            f.write(json.dumps({"id": "kb-13", "title": "Glossary", "text": "A zymurgy glossary.", "tenant": "acme", "year": 2024, "tags": []}) + "\n")
        run_index(pipe)
        new = build_bm25(pipe)
        assert new.path != old and not old.exists()
        labels, _ = new.search(["zymurgy"], 3)[0]
        assert [r["doc_id"] for r in pipe.store().chunks(labels)] == ["kb-13"]
        pipe.close()
