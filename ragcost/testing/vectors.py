"""Seeded synthetic vectors the contracts search (and the project's own tests use)."""

from __future__ import annotations

import numpy as np


def clustered_vectors(n: int, dim: int, clusters: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded, L2-normalised vectors with cluster structure, and each vector's cluster id."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, dim)).astype(np.float32)
    assign = rng.integers(0, clusters, size=n)
    x = centers[assign] + 0.35 * rng.standard_normal((n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), assign
