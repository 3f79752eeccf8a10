"""The VectorIndex protocol: build once, search at many settings.

Vectors are float32, L2-normalised, so inner product is cosine similarity; labels are
int64 chunk ids from the store. Scores are similarities: higher is better. Missing
results (fewer than k found) are label -1 with score -inf.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.registry import Registry


class VectorIndex(ABC):
    """A thin wrapper over one ANN library. The runner times it; it never times itself."""

    backend: ClassVar[str]

    def __init__(self, config: IndexConfig, dim: int, precision: str = "float32") -> None:
        self.config = config
        self.dim = dim
        self.precision = precision
        self.warnings: list[str] = []  # build-time notes for the user (e.g. too few points to train PQ)

    @abstractmethod
    def build(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        """Build from (n, dim) float32 vectors and their (n,) int64 labels."""

    @abstractmethod
    def search(
        self,
        queries: np.ndarray,
        k: int,
        params: dict[str, Any] | None = None,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k for (q, dim) float32 queries -> (scores (q, k) float32, labels (q, k) int64).

        ``params`` overrides the config's search parameters for this call (ef, nprobe).
        ``allowed`` (sorted int64 labels) restricts results to those labels using the
        library's own filtered search (hnswlib ``filter``; faiss ``IDSelector`` in
        ``SearchParameters``) -- never post-filtering.
        """

    def search_one(self, query: np.ndarray, k: int) -> tuple[list[int], list[float]]:
        """Top-k for one (dim,) float32 query with the config's search parameters, as Python lists
        (labels, scores); missing results are -1 / -inf. Backends override it with a path that
        skips the batch bookkeeping: a single query is where per-call overhead shows."""
        scores, labels = self.search(np.asarray(query, dtype=np.float32).reshape(1, -1), k)
        return labels[0].tolist(), scores[0].tolist()

    @abstractmethod
    def save(self, path: Path) -> None:
        """Write the index to ``path`` (one file)."""

    @abstractmethod
    def load(self, path: Path) -> None:
        """Read an index written by ``save``."""

    @abstractmethod
    def nbytes(self) -> int:
        """Bytes the index holds in memory (vectors/codes plus graph or lists)."""

    @abstractmethod
    def __len__(self) -> int: ...


index_registry: Registry[type[VectorIndex]] = Registry("index backend")
