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
