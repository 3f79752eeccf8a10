"""The token-window chunker with the real MiniLM tokenizer."""

from __future__ import annotations

import pytest

from ragcost.ingest.chunker import Chunk, Chunker, document_text


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_path)


@pytest.fixture(scope="module")
def texts():
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


class TestChunker:
    @pytest.mark.parametrize("size, overlap", [(32, 0), (64, 8), (128, 32)])
    def test_no_chunk_exceeds_the_size_even_when_its_text_is_tokenized_again(self, tokenizer, texts, size, overlap):
        chunker = Chunker(tokenizer, size, overlap)
        for chunks in chunker.chunk_many(texts):
            for c in chunks:
                assert 0 < c.n_tokens <= size
                assert chunker.count_tokens(c.text) == c.n_tokens

    def test_consecutive_chunks_share_at_least_the_overlap(self, tokenizer, texts):
        chunker = Chunker(tokenizer, 48, 12)
        for text in texts[:20]:
            chunks = chunker.chunk(text)
            for a, b in zip(chunks, chunks[1:]):
                assert a.start < b.start < a.end
                assert chunker.count_tokens(text[b.start:a.end]) >= 12

    def test_without_overlap_the_chunks_cover_the_text_in_order(self, tokenizer, texts):
        chunker = Chunker(tokenizer, 40, 0)
        for text in texts:
            chunks = chunker.chunk(text)
            assert text[:chunks[0].start].strip() == "" and text[chunks[-1].end:].strip() == ""
            for a, b in zip(chunks, chunks[1:]):
                assert text[a.end:b.start].strip() == ""  # only whitespace between chunks
            assert all(text[c.start:c.end] == c.text for c in chunks)
            assert sum(c.n_tokens for c in chunks) == chunker.count_tokens(text)

    def test_a_short_text_is_one_chunk_sliced_from_the_original(self, tokenizer):
        text = "  Hello,   WORLD!  "
        assert Chunker(tokenizer, 16, 4).chunk(text) == [Chunk("Hello,   WORLD!", 2, 17, 4)]

    @pytest.mark.parametrize("text", ["", "   \n\t "])
    def test_an_empty_text_has_no_chunks(self, tokenizer, text):
        assert Chunker(tokenizer, 16, 4).chunk(text) == []

    def test_a_word_longer_than_a_window_is_cut_inside_it(self, tokenizer):
        chunks = Chunker(tokenizer, 3, 0).chunk("supercalifragilisticexpialidocious")
        assert all(c.n_tokens <= 3 for c in chunks) and "".join(c.text for c in chunks) == "supercalifragilisticexpialidocious"

    @pytest.mark.parametrize("size, overlap", [(16, 16), (16, 20), (8, -1), (0, 0)])
    def test_an_overlap_not_below_the_size_is_refused(self, tokenizer, size, overlap):
        with pytest.raises(ValueError, match="chunk (overlap|size)"):
            Chunker(tokenizer, size, overlap)

    def test_count_tokens_ignores_special_tokens(self, tokenizer):
        assert Chunker(tokenizer, 16).count_tokens("hello world") == 2


def _short_tailed(chunker, texts):
    """(text, chunks without a tail rule) for texts whose last window is shorter than min_tail."""
    plain = Chunker(chunker.tokenizer, chunker.size, chunker.overlap)
    out = []
    for text, chunks in zip(texts, plain.chunk_many(texts)):
        if len(chunks) >= 2 and chunks[-1].n_tokens < chunker.min_tail:
            out.append((text, chunks))
    assert len(out) >= 5, "the fixture texts must have short tails for this test to mean anything"
    return out


class TestTailRule:
    def test_none_keeps_the_short_fragment(self, tokenizer, texts):
        chunker = Chunker(tokenizer, 64, 8, tail="none", min_tail=32)
        for text, plain in _short_tailed(Chunker(tokenizer, 64, 8, tail="merge", min_tail=32), texts):
            assert chunker.chunk(text) == plain

    def test_merge_joins_a_short_last_window_to_the_previous_one(self, tokenizer, texts):
        chunker = Chunker(tokenizer, 64, 8, tail="merge", min_tail=32)
        for text, plain in _short_tailed(chunker, texts):
            got = chunker.chunk(text)
            assert got[:-1] == plain[:-2] and len(got) == len(plain) - 1
            last = got[-1]
            assert last.start == plain[-2].start and last.end == plain[-1].end and text[last.start:last.end] == last.text
            assert chunker.count_tokens(last.text) == last.n_tokens < 64 + 32 - 8

    def test_align_lays_the_last_window_back_to_end_at_the_text_end(self, tokenizer, texts):
        chunker = Chunker(tokenizer, 64, 8, tail="align", min_tail=32)
        for text, plain in _short_tailed(chunker, texts):
            got = chunker.chunk(text)
            assert got[:-1] == plain[:-1] and len(got) == len(plain)
            last = got[-1]
            assert last.end == plain[-1].end and got[-2].start < last.start < plain[-1].start
            # the window starts at the first word start that keeps it within size tokens
            assert 32 <= last.n_tokens <= 64 and last.n_tokens > plain[-1].n_tokens
            assert chunker.count_tokens(last.text) == last.n_tokens

    def test_a_long_enough_tail_and_a_single_window_are_left_alone(self, tokenizer, texts):
        for tail in ("merge", "align"):
            chunker = Chunker(tokenizer, 64, 8, tail=tail, min_tail=1)
            assert chunker.chunk_many(texts[:30]) == Chunker(tokenizer, 64, 8).chunk_many(texts[:30])
            assert Chunker(tokenizer, 64, 8, tail=tail).chunk("a short text") == Chunker(tokenizer, 64, 8).chunk("a short text")

    def test_the_default_min_tail_is_half_the_window(self, tokenizer):
        assert Chunker(tokenizer, 254, 32, tail="align").min_tail == 127

    def test_made_by_names_the_rule_only_when_there_is_one(self, tokenizer):
        assert Chunker(tokenizer, 254, 32).made_by() == {"chunk_size": 254, "chunk_overlap": 32}
        assert Chunker(tokenizer, 254, 32, tail="align").made_by()["chunk_tail"] == "align:127"

    @pytest.mark.parametrize("tail, min_tail, match", [("drop", None, "tail rule 'drop' is unknown"),
                                                       ("merge", 65, "min_tail must be in 1..size"),
                                                       ("align", 0, "min_tail must be in 1..size")])
    def test_a_bad_rule_is_refused(self, tokenizer, tail, min_tail, match):
        with pytest.raises(ValueError, match=match):
            Chunker(tokenizer, 64, 8, tail=tail, min_tail=min_tail)


class TestTitleRule:
    @pytest.mark.parametrize("title, text, rule, expected", [
        ("Flow", "Flow past a plate.", "prepend", "Flow\nFlow past a plate."),  # BEIR and MTEB: always
        ("Flow", "Laminar flow.", "prepend", "Flow\nLaminar flow."),
        ("Flow", "Flow past a plate.", "dedupe", "Flow past a plate."),          # 0.1: not when the text begins with it
        ("Flow", "Laminar flow.", "dedupe", "Flow\nLaminar flow."),
        ("Flow", "Laminar flow.", "none", "Laminar flow."),
        ("", "Laminar flow.", "prepend", "Laminar flow."),
    ])
    def test_the_rule_decides_where_the_title_goes(self, title, text, rule, expected):
        assert document_text(title, text, rule) == expected

    def test_the_chunker_applies_its_rule_and_names_it_unless_it_is_the_old_one(self, tokenizer):
        from ragcost.records import SourceDocument

        doc = SourceDocument(id="1", title="Flow", text="Flow past a plate.")
        assert Chunker(tokenizer, 64, 8).text_of(doc) == "Flow past a plate."
        assert Chunker(tokenizer, 64, 8).made_by() == {"chunk_size": 64, "chunk_overlap": 8}  # stores made by 0.1 stay valid
        prepend = Chunker(tokenizer, 64, 8, title="prepend")
        assert prepend.text_of(doc) == "Flow\nFlow past a plate."
        assert prepend.made_by()["chunk_title"] == "prepend"

    def test_an_unknown_rule_is_refused(self, tokenizer):
        with pytest.raises(ValueError, match="title rule 'top' is unknown; use one of every_chunk, prepend, dedupe, none"):
            Chunker(tokenizer, 64, 8, title="top")


@pytest.fixture(scope="module")
def topic_docs(texts):
    """The language reference's topics as titled documents (title: the topic's name)."""
    from pydoc_data.topics import topics

    from ragcost.records import SourceDocument

    return [SourceDocument(id=k, title=k.replace("-", " "), text=topics[k]) for k in sorted(topics)]


class TestTitleOnEveryChunk:
    def test_every_window_begins_with_the_title_and_still_fits_the_size(self, tokenizer, topic_docs):
        chunker = Chunker(tokenizer, 64, 8, tail="align", title="every_chunk")
        many = 0
        for d, chunks in zip(topic_docs, chunker.chunk_documents(topic_docs)):
            many += len(chunks) > 1
            whole = chunker.text_of(d)
            assert chunks[0].start == 0 and chunks[0].text == whole[:chunks[0].end]  # the first window, title included
            for c in chunks:
                assert c.text.startswith(d.title + "\n")
                assert c.text[len(d.title) + 1:] == whole[c.end - (len(c.text) - len(d.title) - 1):c.end]  # ends at end
                assert chunker.count_tokens(c.text) == c.n_tokens <= 64
        assert many > 20

    def test_the_windows_cover_the_text_with_the_title_tokens_taken_off_the_size(self, tokenizer, topic_docs):
        chunker = Chunker(tokenizer, 64, 8, title="every_chunk")
        for d, chunks in zip(topic_docs, chunker.chunk_documents(topic_docs)):
            head = chunker.count_tokens(d.title)
            body = Chunker(tokenizer, 64 - head, 8).chunk(d.text)
            shift = len(d.title) + 1
            assert [(max(c.start - shift, 0), c.end - shift) for c in chunks] == [(b.start, b.end) for b in body]

    def test_a_one_window_document_is_chunked_as_under_prepend(self, tokenizer):
        from ragcost.records import SourceDocument

        doc = SourceDocument(id="1", title="Flow", text="Laminar flow past a flat plate.")
        every = Chunker(tokenizer, 64, 8, title="every_chunk").chunk_documents([doc])
        assert [c.text for c in every[0]] == ["Flow\nLaminar flow past a flat plate."]
        prepend = Chunker(tokenizer, 64, 8, title="prepend").chunk_documents([doc])
        assert every == prepend  # the stored chunk (and its vector) is kept when a store moves from prepend

    def test_a_title_longer_than_a_quarter_of_the_window_or_none_is_not_repeated(self, tokenizer, topic_docs):
        from ragcost.records import SourceDocument

        text = topic_docs[0].text
        long = SourceDocument(id="1", title="a very long title of many words indeed", text=text)  # 8 tokens > 24 // 4
        untitled = SourceDocument(id="2", title="", text=text)
        got = Chunker(tokenizer, 24, 4, title="every_chunk").chunk_documents([long, untitled])
        assert got == Chunker(tokenizer, 24, 4, title="prepend").chunk_documents([long, untitled])
        assert len(got[0]) > 1 and not got[0][1].text.startswith(long.title)

    def test_the_rule_is_named_in_made_by_and_another_rule_chunks_as_that_rule(self, tokenizer, topic_docs):
        every = Chunker(tokenizer, 64, 8, tail="align", title="every_chunk")
        assert every.made_by()["chunk_title"] == "every_chunk"
        prepend = every.with_title("prepend")
        assert (prepend.size, prepend.overlap, prepend.tail, prepend.min_tail, prepend.title) == (64, 8, "align", 32, "prepend")
        assert prepend.chunk_documents(topic_docs[:10]) == Chunker(tokenizer, 64, 8, tail="align", title="prepend").chunk_documents(topic_docs[:10])
