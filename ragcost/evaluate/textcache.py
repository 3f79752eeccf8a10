"""Vectors by chunk text, per embedder fingerprint: a chunking variant re-embeds only the chunks it changed.

Two chunkings of one corpus share most of their chunks (every document shorter than a window is one
identical chunk; a tail rule changes only the last window), so the eval grid keeps one file of
(text hash -> vector) per (dataset, embedder fingerprint) and wraps the embedder with it while the
corpus is indexed. Only texts not in the file reach the model; the summary's embed seconds are
those of the texts embedded now.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class TextVectorCache:
    """(text hash -> float32 vector) kept in one .npz file; ``save`` writes it atomically when it grew."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.vectors: dict[str, np.ndarray] = {}
        self.offered: dict[str, np.ndarray] = {}  # from the pipeline's store, not yet used (never saved unused)
        self._dirty = False
        if path.is_file():
            z = np.load(path, allow_pickle=False)
            self.vectors = dict(zip(z["hashes"].tolist(), z["vectors"]))

    def add(self, texts: Iterable[str], vectors: np.ndarray) -> None:
        for t, v in zip(texts, vectors):
            h = text_hash(t)
            if h not in self.vectors:
                self.vectors[h] = np.asarray(v, np.float32)
                self._dirty = True

    def offer(self, texts: Iterable[str], vectors: np.ndarray) -> set[str]:
        """Vectors made elsewhere (the pipeline's own store), kept for this run only: saved with the cache only
        when a chunk of this corpus used them. Returns the hashes offered that the cache did not hold."""
        new = set()
        for t, v in zip(texts, vectors):
            h = text_hash(t)
            if h not in self.vectors and h not in self.offered:
                self.offered[h] = np.asarray(v, np.float32)
                new.add(h)
        return new

    def take(self, h: str) -> Optional[np.ndarray]:
        """The vector for a text hash: cached, or offered (then kept in the cache from now on)."""
        v = self.vectors.get(h)
        if v is None and h in self.offered:
            v = self.vectors[h] = self.offered.pop(h)
            self._dirty = True
        return v

    def save(self) -> None:
        if not self._dirty or not self.vectors:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = sorted(self.vectors)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, hashes=np.array(keys), vectors=np.vstack([self.vectors[k] for k in keys]).astype(np.float32))
        tmp.replace(self.path)
        self._dirty = False


class CachedEmbedder:
    """The embedder, answering ``embed`` from the text cache first; everything else is the embedder's own."""

    def __init__(self, inner: Any, cache: TextVectorCache) -> None:
        self._inner, self._cache = inner, cache
        self.hits = 0
        self.hit_hashes: set[str] = set()  # the texts answered from the cache (or from the vectors offered to it)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def known_vectors(self, texts: list[str]) -> list[Optional[np.ndarray]]:
        """The cached vector of each text, None where the model must embed it (an executor asks before it sends)."""
        hashes = [text_hash(t) for t in texts]
        found = [self._cache.take(h) for h in hashes]
        self._hit([h for h, v in zip(hashes, found) if v is not None])
        return found

    def _hit(self, hashes: list[str]) -> None:
        self.hits += len(hashes)
        self.hit_hashes.update(hashes)

    def add_vectors(self, texts: list[str], vectors: np.ndarray) -> None:
        """Vectors an executor embedded elsewhere (a Ray worker), kept like the ones ``embed`` makes."""
        self._cache.add(texts, vectors)

    def embed(self, texts: list[str]) -> np.ndarray:
        hashes = [text_hash(t) for t in texts]
        missing = [i for i, h in enumerate(hashes) if self._cache.take(h) is None]
        if missing:
            self._cache.add([texts[i] for i in missing], self._inner.embed([texts[i] for i in missing]))
        gone = set(missing)
        self._hit([h for i, h in enumerate(hashes) if i not in gone])
        if not texts:
            return self._inner.embed(texts)
        return np.vstack([self._cache.vectors[h] for h in hashes]).astype(np.float32)
