"""``backend: numpy-exact``: brute force over a float32 numpy matrix, saved as one .npz file.

What the cost model needs it declares on its kind: it holds every vector at float32 (so no exact-scan
copy is charged beside it) and its size is the matrix and the int64 labels (what ``plan`` prints)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.index import KindSpec, VectorIndex, index_registry
from ragcost.index.exact import exact_search
from ragcost.index.params import NoParams


def flat_bytes(n: int, dim: int, precision: str = "float32", **_: Any) -> float:
    """The float32 matrix and an int64 label per vector."""
    return n * (dim * 4 + 8)


@index_registry.register("numpy-exact")
class NumpyExactIndex(VectorIndex):
    backend = "numpy-exact"
    kinds = {"flat": KindSpec(NoParams, NoParams, holds_float32=True, size=flat_bytes)}
    suffix = "npz"

    def __init__(self, config: IndexConfig, dim: int, precision: str = "float32") -> None:
        super().__init__(config, dim, precision)
        self._x = np.zeros((0, dim), np.float32)
        self._labels = np.zeros(0, np.int64)

    def build(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        self._x = np.ascontiguousarray(vectors, dtype=np.float32)
        self._labels = np.asarray(labels, dtype=np.int64)

    def search(self, queries: np.ndarray, k: int, params: dict[str, Any] | None = None, allowed: Any = None):
        self.search_params(params)  # a knob this kind lacks is refused as any backend refuses it
        rows = None if allowed is None else np.flatnonzero(np.isin(self._labels, allowed))
        return exact_search(self._x, self._labels, queries, k, rows=rows)

    def save(self, path: Path) -> None:
        with open(path, "wb") as f:
            np.savez(f, x=self._x, labels=self._labels)

    def load(self, path: Path) -> None:
        with np.load(path) as data:
            self._x, self._labels = data["x"], data["labels"]

    def nbytes(self) -> int:
        return int(self._x.nbytes + self._labels.nbytes)

    def __len__(self) -> int:
        return len(self._labels)
