"""A new index backend from this test module alone: one class, one registration.

It passes the inherited VectorIndex contract, and a pipeline naming it indexes and queries
through the CLI, with no other file touched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.index import KindSpec, VectorIndex, index_registry
from ragcost.index.exact import exact_search
from ragcost.index.params import NoParams
from tests.cli.conftest import run_cli, write_corpus, write_pipeline
from ragcost.testing.index import IndexContract


@index_registry.register("numpy-test")
class NumpyIndex(VectorIndex):
    """Brute force over a numpy matrix: exact, float32, one .npz file."""

    backend = "numpy-test"
    kinds = {"flat": KindSpec(NoParams, NoParams)}
    suffix = "npz"

    def __init__(self, config: IndexConfig, dim: int, precision: str = "float32") -> None:
        super().__init__(config, dim, precision)
        self._x = np.zeros((0, dim), np.float32)
        self._labels = np.zeros(0, np.int64)

    def build(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        self._x = np.ascontiguousarray(vectors, dtype=np.float32)
        self._labels = np.asarray(labels, dtype=np.int64)

    def search(self, queries, k, params: dict[str, Any] | None = None, allowed=None):
        self.search_params(params)  # a knob this kind lacks is refused like any backend's
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


def teardown_module() -> None:
    index_registry.unregister("numpy-test")


class TestNumpyIndex(IndexContract):
    config = IndexConfig(backend="numpy-test", kind="flat")
    min_recall = 1.0


def test_a_pipeline_naming_the_plugin_indexes_and_queries_through_the_cli(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    kb = write_pipeline(tmp_path, index={"backend": "numpy-test", "kind": "flat"})
    code, out, err = run_cli(capsys, "index", kb)
    assert code == 0, err
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    assert manifest["backend"] == "numpy-test" and manifest["index_file"].endswith(".npz")
    code, out, err = run_cli(capsys, "query", kb, "how do I get my money back?", "--json")
    assert code == 0, err
    assert "Refund policy" in out


def test_an_unknown_kind_of_the_plugin_lists_its_kinds(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    kb = write_pipeline(tmp_path, index={"backend": "numpy-test", "kind": "hnsw"})
    code, _, err = run_cli(capsys, "validate", kb)
    assert code != 0 and "backend 'numpy-test' has no kind 'hnsw'; use one of flat" in err
