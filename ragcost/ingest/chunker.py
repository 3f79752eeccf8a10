"""Token-window chunking with the embedder's own tokenizer; chunk text is sliced from the original."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass
class Chunk:
    text: str
    start: int  # character offsets into the document text
    end: int
    n_tokens: int


class Chunker:
    """Windows of ``size`` tokens stepping ``size - overlap``, with boundaries moved to whitespace between words."""

    def __init__(self, tokenizer: Any, size: int, overlap: int = 0) -> None:
        if size < 1:
            raise ValueError(f"chunk size must be at least 1 token, got {size}")
        if overlap < 0 or overlap >= size:
            raise ValueError(f"chunk overlap must be in 0..size-1 (size {size}), got {overlap}; lower the overlap")
        self.tokenizer, self.size, self.overlap = tokenizer, size, overlap

    def _offsets(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        # verbose=False: long documents exceed the model's max length on purpose; that is why we chunk
        enc = self.tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return [[tuple(o) for o in offs] for offs in enc["offset_mapping"]]

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` without special tokens."""
        return len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def chunk(self, text: str) -> list[Chunk]:
        """The chunks of one text; [] for an empty or whitespace-only text."""
        return self.chunk_many([text])[0]

    def chunk_many(self, texts: Sequence[str]) -> list[list[Chunk]]:
        """Chunks of many texts, tokenized in one batch (the fast tokenizer parallelises it)."""
        out: list[list[Chunk]] = [[] for _ in texts]
        todo = [i for i, t in enumerate(texts) if t and t.strip()]
        if todo:
            for i, offs in zip(todo, self._offsets([texts[i] for i in todo])):
                out[i] = self._windows(texts[i], offs)
        return out

    def _windows(self, text: str, offs: list[tuple[int, int]]) -> list[Chunk]:
        n = len(offs)

        def word_start(b: int) -> bool:
            # a token with no gap before it continues a word ("##ing", "."): splitting there would
            # make the chunk's text re-tokenize differently from its window
            return b == 0 or b >= n or offs[b][0] > offs[b - 1][1]

        def snap(lo: int, target: int, hi: int) -> int:
            """The last word start in (lo, target], else the first in (target, hi], else target."""
            for b in range(target, lo, -1):
                if word_start(b):
                    return b
            return next((b for b in range(target + 1, hi + 1) if word_start(b)), target)

        chunks, i = [], 0
        while i < n:
            # a single word longer than a window has no word start inside it: cut inside the word
            j = min(i + self.size, n)
            j = snap(i, j, j)
            chunks.append(Chunk(text[offs[i][0]:offs[j - 1][1]], offs[i][0], offs[j - 1][1], j - i))
            if j >= n:
                break
            i = snap(i, max(j - self.overlap, i + 1), j)
        return chunks
