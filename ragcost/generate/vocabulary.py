"""The corpus's own words: a question that names what the corpus never mentions is about something else.

An off-topic question that shares the corpus's common words ("How do I declare a constant in JavaScript?"
against the Python language reference) finds those words together in a passage and gets answered from it.
What gives it away is the term the corpus never uses: ``javascript``, ``numpy``, ``pip``. The generate
stage's ``abstain_unknown`` abstains, before any backend is called (an LLM's dollars included), when that
share of the question's content words is unknown to the corpus.

A word is known when a word of the corpus starts with its first ``max(PREFIX, len - 3)`` letters (the
whole word when it is that short): ``relate`` meets ``related``, ``dicts`` ``dict``, ``mangle``
``mangling``, ``pad`` ``padding``; inflections are not unknown terms. A word of :data:`TYPO` letters or
more is also known when one edit (a letter dropped, added, changed or two swapped) makes a corpus word:
``floting`` is ``floating`` mistyped, not a term from elsewhere. (Chosen on the demo's dev questions:
prefix lengths 4-6 and typo lengths 5-7 were compared; 4 and 6 are the most permissive that lost no dev
question, docs/concepts/useful-documents.md.) The words are the extractive
backend's content words (lower-case letters and digits, its stop words and one-letter words left out).

The vocabulary is built from the stored chunks by `ragcost index` (the stage's ``prepare``) and kept beside
the index as ``vocabulary-<corpus revision>.json``; a query loads it, and builds it if it is missing or is
another revision's.
"""

from __future__ import annotations

import bisect
import json
import os
from pathlib import Path
from typing import Any, Iterable

from ragcost.generate.extractive import WORD, content_words

FORMAT = 1
PREFIX = 4
TYPO = 6
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class Vocabulary:
    """The set of words the corpus uses, with the prefix rule for inflections."""

    def __init__(self, words: Iterable[str]) -> None:
        self.words = sorted(set(words))
        self._set = set(self.words)

    def __len__(self) -> int:
        return len(self.words)

    def known(self, word: str) -> bool:
        if word in self._set:
            return True
        stem = word[: max(PREFIX, len(word) - 3)]  # a short word whole: "pad" meets "padding"
        i = bisect.bisect_left(self.words, stem)
        if i < len(self.words) and self.words[i].startswith(stem):
            return True
        return len(word) >= TYPO and any(e in self._set for e in _edits1(word))

    def unknown(self, question: str) -> tuple[list[str], int]:
        """The question's content words the corpus never uses (sorted), and how many content words it has."""
        words = content_words(question)
        return sorted(w for w in words if not self.known(w)), len(words)


def _edits1(w: str) -> set[str]:
    """Every string one edit from ``w``: a letter deleted, two neighbours swapped, a letter replaced or inserted."""
    cuts = [(w[:i], w[i:]) for i in range(len(w) + 1)]
    return ({a + b[1:] for a, b in cuts if b} | {a + b[1] + b[0] + b[2:] for a, b in cuts if len(b) > 1}
            | {a + c + b[1:] for a, b in cuts if b for c in _LETTERS} | {a + c + b for a, b in cuts for c in _LETTERS})


def of_texts(texts: Iterable[str]) -> Vocabulary:
    words: set[str] = set()
    for t in texts:
        words.update(WORD.findall(t.lower()))
    return Vocabulary(words)


def _path(ctx: Any, revision: str) -> Path:
    return Path(ctx.index_dir) / f"vocabulary-{revision[:16]}.json"


def load_or_build(ctx: Any) -> tuple[Vocabulary, str]:
    """The vocabulary of the pipeline's stored chunks, loaded when this revision's is kept beside the index, else
    built and kept; with a line saying which, and where."""
    store = ctx.store()
    revision = store.revision()
    path = _path(ctx, revision)
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") == FORMAT and data.get("corpus_revision") == revision:
                vocab = Vocabulary(data["words"])
                return vocab, f"{len(vocab):,} words, kept -> {path}"
        except (OSError, ValueError, KeyError):
            pass  # unreadable or half written: built again below
    _, texts = store.chunk_column("text")
    vocab = of_texts(texts)
    line = f"{len(vocab):,} words of {len(texts):,} chunks"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"format": FORMAT, "corpus_revision": revision, "words": vocab.words}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:  # a read-only index folder (a served image): used from memory, built again next start
        if tmp.parent.is_dir():
            tmp.unlink(missing_ok=True)
        return vocab, f"{line}, not kept ({type(e).__name__}: {e.strerror or e})"
    for old in path.parent.glob("vocabulary-*.json"):  # an older revision's
        if old != path:
            old.unlink(missing_ok=True)
    return vocab, f"{line} -> {path}"
