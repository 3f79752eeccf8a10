"""Word vectors from the pipeline's own embedder: how near two differing words are in its space.

The meaning check (:func:`ragcost.cache.meaning.compare`) lets two questions differ in words that
are near-synonyms (create/make, error/exception). Each word is embedded alone by the same model
that embeds the questions, once per process (a dict), in one batch per comparison.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np


class WordVectors:
    """``similar(x, y)``: the cosine of two words' vectors, each embedded once by ``embed(texts)``."""

    def __init__(self, embed: Callable[[list[str]], np.ndarray], max_words: int = 200_000) -> None:
        self._embed, self._max = embed, max_words
        self.vectors: dict[str, np.ndarray] = {}

    def warm(self, words: Iterable[str]) -> None:
        new = sorted({w for w in words if w not in self.vectors})
        if not new:
            return
        if len(self.vectors) + len(new) > self._max:
            self.vectors.clear()  # a bound on memory: words come back on the next comparison
        vecs = np.asarray(self._embed(new), np.float32)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        self.vectors.update(zip(new, vecs))

    def similar(self, x: str, y: str) -> float:
        if x not in self.vectors or y not in self.vectors:
            self.warm((x, y))
        return float(self.vectors[x] @ self.vectors[y])
