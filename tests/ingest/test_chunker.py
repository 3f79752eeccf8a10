"""The token-window chunker with the real MiniLM tokenizer."""

from __future__ import annotations

import pytest

from ragcost.ingest.chunker import Chunk, Chunker


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
