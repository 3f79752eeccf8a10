"""Token-window chunking with the embedder's own tokenizer; chunk text is sliced from the original."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence

Tail = Literal["none", "merge", "align"]
TAILS = ("none", "merge", "align")
TitleRule = Literal["every_chunk", "prepend", "dedupe", "none"]
TITLES = ("every_chunk", "prepend", "dedupe", "none")
LEGACY_TITLE = "dedupe"  # ragcost 0.1's rule: stores made under it carry no title key and stay valid


def document_text(title: str, text: str, rule: TitleRule = "prepend") -> str:
    """A document's whole text under a title rule. ``prepend``: title, newline, text, for every document,
    as BEIR and MTEB encode a passage (a text that begins with its title then holds it twice: the weight
    their figures include; docs/tasks/chunking.md, "The title rule"); ``every_chunk``: the same whole text (its chunks
    differ: each carries the title, see :meth:`Chunker.chunk_documents`); ``dedupe``: the title only when
    the text does not already begin with it; ``none``: the text alone."""
    if rule not in TITLES:
        raise ValueError(f"title rule {rule!r} is unknown; use one of {', '.join(TITLES)}")
    if not title or rule == "none" or (rule == "dedupe" and text.startswith(title)):
        return text
    return f"{title}\n{text}"


@dataclass
class Chunk:
    text: str
    start: int  # character offsets into the document text
    end: int
    n_tokens: int


def default_min_tail(size: int) -> int:
    """Half the window: measured better than a quarter on SciFact and Cranfield (docs/tasks/chunking.md)."""
    return max(1, size // 2)


def max_header_tokens(size: int) -> int:
    """The longest title ``every_chunk`` repeats in each window: a quarter of it, so the text keeps most of it."""
    return size // 4


class Chunker:
    """Windows of ``size`` tokens stepping ``size - overlap``, with boundaries moved to whitespace between words.

    The tail rule handles a last window shorter than ``min_tail`` tokens (a fragment that, alone, can
    outscore its whole document): ``merge`` extends the previous window to the text's end (it may then
    exceed ``size`` by fewer than ``min_tail - overlap`` tokens, which a model at its window truncates);
    ``align`` lays the last window back so it ends at the text's end and holds ``size`` tokens;
    ``none`` keeps the fragment.

    The title rule ``every_chunk`` puts the title, a newline, and a window of the text in every chunk:
    the text is cut in windows of ``size`` less the title's tokens, so each chunk still fits the model.
    A title longer than :func:`max_header_tokens` (or one that leaves no more than ``overlap`` tokens
    for the text) is not repeated: that document is chunked as under ``prepend``.
    """

    def __init__(self, tokenizer: Any, size: int, overlap: int = 0, tail: Tail = "none",
                 min_tail: Optional[int] = None, title: TitleRule = LEGACY_TITLE) -> None:
        if size < 1:
            raise ValueError(f"chunk size must be at least 1 token, got {size}")
        if overlap < 0 or overlap >= size:
            raise ValueError(f"chunk overlap must be in 0..size-1 (size {size}), got {overlap}; lower the overlap")
        if tail not in TAILS:
            raise ValueError(f"chunk tail rule {tail!r} is unknown; use one of {', '.join(TAILS)}")
        self.tokenizer, self.size, self.overlap = tokenizer, size, overlap
        if title not in TITLES:
            raise ValueError(f"title rule {title!r} is unknown; use one of {', '.join(TITLES)}")
        self.tail, self.title = tail, title
        self._min_tail_default = min_tail is None
        self.min_tail = default_min_tail(size) if min_tail is None else min_tail
        if tail != "none" and not 1 <= self.min_tail <= size:
            raise ValueError(f"chunk min_tail must be in 1..size ({size}), got {self.min_tail}")

    def made_by(self) -> dict[str, Any]:
        """What decides the chunks' text (stored beside the vectors; a change re-embeds). The tail key
        appears only with a rule, and the title key only for a rule other than 0.1's, so stores chunked
        before either existed stay valid."""
        out: dict[str, Any] = {"chunk_size": self.size, "chunk_overlap": self.overlap}
        if self.tail != "none":
            out["chunk_tail"] = f"{self.tail}:{self.min_tail}"
        if self.title != LEGACY_TITLE:
            out["chunk_title"] = self.title
        return out

    def with_title(self, title: TitleRule) -> "Chunker":
        """This chunker under another title rule (what a store made under that rule was chunked with)."""
        return Chunker(self.tokenizer, self.size, self.overlap, self.tail,
                       None if self._min_tail_default else self.min_tail, title)

    def text_of(self, doc: Any) -> str:
        """A document's whole text (``doc`` has ``title`` and ``text``) under this chunker's title rule; its
        chunks come from :meth:`chunk_documents`."""
        return document_text(doc.title, doc.text, self.title)

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

    def chunk_many(self, texts: Sequence[str], sizes: Optional[Sequence[int]] = None) -> list[list[Chunk]]:
        """Chunks of many texts, tokenized in one batch (the fast tokenizer parallelises it); ``sizes``:
        each text's window in tokens (default: this chunker's size)."""
        out: list[list[Chunk]] = [[] for _ in texts]
        todo = [i for i, t in enumerate(texts) if t and t.strip()]
        if todo:
            for i, offs in zip(todo, self._offsets([texts[i] for i in todo])):
                out[i] = self._windows(texts[i], offs, self.size if sizes is None else sizes[i])
        return out

    def chunk_documents(self, docs: Sequence[Any]) -> list[list[Chunk]]:
        """The chunks of documents (each with ``title`` and ``text``) under this chunker's title rule:
        what is embedded and stored. ``start``/``end`` are offsets into :meth:`text_of` the document; under
        ``every_chunk`` a chunk's text is the title, a newline and its window, and they span the window
        (the first one from 0, the title included)."""
        if self.title != "every_chunk":
            return self.chunk_many([self.text_of(d) for d in docs])
        heads = self._header_tokens([d.title for d in docs])
        whole = [i for i, (d, h) in enumerate(zip(docs, heads)) if h is None or not d.text.strip()]
        out: list[list[Chunk]] = [[] for _ in docs]
        for i, chunks in zip(whole, self.chunk_many([document_text(docs[i].title, docs[i].text, "prepend") for i in whole])):
            out[i] = chunks
        skip = set(whole)
        rest = [i for i in range(len(docs)) if i not in skip]
        bodies = self.chunk_many([docs[i].text for i in rest], [self.size - heads[i] for i in rest])
        for i, chunks in zip(rest, bodies):
            head, shift = docs[i].title, len(docs[i].title) + 1  # offsets into text_of(doc): title, newline, text
            # the first window's span takes in the title before it (as under prepend, so a kept chunk is equal)
            out[i] = [Chunk(f"{head}\n{c.text}", 0 if k == 0 else c.start + shift, c.end + shift, c.n_tokens + heads[i])
                      for k, c in enumerate(chunks)]
        return out

    def _header_tokens(self, titles: Sequence[str]) -> list[Optional[int]]:
        """Tokens of each title repeated as a header; None where it is not repeated (empty, or too long)."""
        cap = max_header_tokens(self.size)
        todo = [i for i, t in enumerate(titles) if t and t.strip()]
        out: list[Optional[int]] = [None] * len(titles)
        if todo:
            enc = self.tokenizer([titles[i] for i in todo], add_special_tokens=False, verbose=False)["input_ids"]
            for i, ids in zip(todo, enc):
                if len(ids) <= cap and self.size - len(ids) > self.overlap:
                    out[i] = len(ids)
        return out

    def _windows(self, text: str, offs: list[tuple[int, int]], size: int) -> list[Chunk]:
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

        spans, i = [], 0
        while i < n:
            # a single word longer than a window has no word start inside it: cut inside the word
            j = min(i + size, n)
            j = snap(i, j, j)
            spans.append((i, j))
            if j >= n:
                break
            i = snap(i, max(j - self.overlap, i + 1), j)
        spans = self._tail(spans, n, word_start, size)
        return [Chunk(text[offs[a][0]:offs[b - 1][1]], offs[a][0], offs[b - 1][1], b - a) for a, b in spans]

    def _min_tail(self, size: int) -> int:
        """The tail threshold for a window of ``size`` tokens (a header's window is shorter than the chunker's)."""
        if size == self.size:
            return self.min_tail
        return default_min_tail(size) if self._min_tail_default else min(self.min_tail, size)

    def _tail(self, spans: list[tuple[int, int]], n: int, word_start: Any, size: int) -> list[tuple[int, int]]:
        """Apply the tail rule to the token spans of one text cut in windows of ``size`` tokens."""
        if self.tail == "none" or len(spans) < 2 or spans[-1][1] - spans[-1][0] >= self._min_tail(size):
            return spans
        if self.tail == "merge":
            return [*spans[:-2], (spans[-2][0], n)]
        # the first word start that keeps the window within size tokens, after the previous window's start
        lo = max(n - size, spans[-2][0] + 1)
        start = next((b for b in range(lo, n) if word_start(b)), lo)
        return [*spans[:-1], (start, n)]
