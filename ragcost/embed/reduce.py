"""Dimension reduction: truncate (Matryoshka-style) and re-normalise."""

from __future__ import annotations

import numpy as np


def truncate(vectors: np.ndarray, dim: int | None) -> np.ndarray:
    """First ``dim`` components, re-normalised to unit length; float32, C-contiguous."""
    v = np.asarray(vectors, dtype=np.float32)
    if dim is None or dim >= v.shape[1]:
        return np.ascontiguousarray(v)
    out = np.ascontiguousarray(v[:, :dim])
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out /= norms
    return out


def query_vectors(embedder, texts: list[str], dim: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Queries embedded as a query stage does it: ``(vectors at dim, full vectors)`` (the model's query side,
    ``embed_queries``, where it has one)."""
    full = np.asarray(embedder.embed_queries(texts) if hasattr(embedder, "embed_queries") else embedder.embed(texts))
    return truncate(full, dim), full
