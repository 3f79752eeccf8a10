"""The grounded check's sentence rule, shared by the check and the index-time sentence vectors.

A change here changes which sentences exist: bump ``ragcost.guards.sentence_vectors.SPLITTER`` so
vectors made under the old rule are re-embedded, not mixed in.
"""

from __future__ import annotations

import re

_CITATION = re.compile(r"\s*\[[^\]]{1,40}\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n+")
SENTENCE_END = _SENTENCE_END  # where one sentence ends and the next begins (ragcost.serve.gate splits streams by it)
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def sentences(text: str, min_chars: int = 12) -> list[tuple[int, int, str]]:
    """(start, end, sentence without citation markers) for each sentence of at least ``min_chars``."""
    out, pos = [], 0
    for m in list(_SENTENCE_END.finditer(text)) + [None]:
        end = m.start() if m else len(text)
        raw = text[pos:end]
        clean = _CITATION.sub("", raw).strip()
        if len(clean) >= min_chars:
            lead = len(raw) - len(raw.lstrip())
            out.append((pos + lead, end, clean))
        pos = m.end() if m else len(text)
    return out


def normalised(text: str) -> str:
    """The form the verbatim rule compares: no citation markers, one space between words, case-folded, plain quotes."""
    return " ".join(_CITATION.sub("", text).split()).casefold().translate(_QUOTES)


def pieces(raw: str) -> list[str]:
    """The normalised parts of an answer sentence between its citation markers ("A [1] B [2]" -> a, b): an
    extractive answer joins passage pieces that do not end a sentence, so one sentence may quote two passages."""
    return [p for p in (" ".join(x.split()).casefold().translate(_QUOTES) for x in _CITATION.split(raw)) if p]
