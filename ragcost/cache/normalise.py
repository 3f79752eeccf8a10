"""The exact tier's text normaliser: NFKC, whitespace collapsed, case folded, trailing punctuation dropped."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_SPACE = re.compile(r"\s+")
_TRAILING = re.compile(r"[\s\.\?!,;:…。？！]+$")


@dataclass(frozen=True)
class Normaliser:
    """Each rule can be switched off (``normalise: {casefold: false}`` in the stage's YAML)."""

    nfkc: bool = True
    whitespace: bool = True
    casefold: bool = True
    trailing_punctuation: bool = True

    def __call__(self, text: str) -> str:
        if self.nfkc:
            text = unicodedata.normalize("NFKC", text)
        if self.whitespace:
            text = _SPACE.sub(" ", text).strip()
        if self.casefold:
            text = text.casefold()
        if self.trailing_punctuation:
            text = _TRAILING.sub("", text)
        return text
