"""The VectorIndex contract: a backend's test class sets ``config`` (and ``precision``, the recall it
honestly reaches) and inherits every test here. A new backend, built in or a plugin, passes these.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from ragcost.config.index import IndexConfig
from ragcost.errors import ConfigError
from ragcost.index import FilteredResult, build_index, exact_search, index_class, new_index
from ragcost.testing.vectors import clustered_vectors

N, DIM, K = 3000, 64, 10
LABELS = (10**12 + np.arange(N) * 7).astype(np.int64)  # large, non-contiguous: never row positions


@lru_cache(maxsize=None)
def dataset() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded clustered vectors, queries near stored points, and the exact top-k labels."""
    x, _ = clustered_vectors(N, DIM, seed=0)
    rng = np.random.default_rng(1)
    q = x[rng.choice(N, 100, replace=False)] + 0.1 * rng.standard_normal((100, DIM)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    _, truth = exact_search(x, LABELS, q, K)
    return x, q, truth


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


class IndexContract:
    """Subclasses set ``config``, ``precision`` and the recall they honestly reach on this data."""

    config: IndexConfig
    precision = "float32"
    min_recall = 0.9
    low_effort: dict = {}  # search params that should search less (recall no higher)
    full_effort: dict = {}  # search params that visit everything the index has (IVF: all lists)

    @pytest.fixture(scope="class")
    def index(self, request):
        x, _, _ = dataset()
        return build_index(request.cls.config, x, LABELS, request.cls.precision)

    def test_index_comes_from_the_registry(self, index):
        # The registered backend's class, or its sharded counterpart when the config asks for shards.
        assert type(index) is index_class(self.config)
        assert type(index).backend == self.config.backend
        assert len(index) == N

    def test_recall_against_exact_is_reported_and_reasonable(self, index, record_property):
        _, q, truth = dataset()
        r = recall(index.search(q, K)[1], truth)
        record_property("recall_at_10", r)
        assert r >= self.min_recall, f"recall@10 {r:.3f} < {self.min_recall}"

    @pytest.mark.parametrize("fraction", [0.1, 0.01])
    def test_allowed_labels_only_returns_allowed_and_k_when_k_match(self, index, fraction):
        _, q, _ = dataset()
        allowed = np.sort(np.random.default_rng(2).choice(LABELS, int(N * fraction), replace=False))
        # IVF only sees allowed items in the lists it probes; with 1% allowed it must probe them all.
        params = self.full_effort if fraction < 0.1 else {}
        _, labels = index.search(q, K, params=params, allowed=allowed)
        assert np.isin(labels, allowed).all(), "a label outside `allowed` came back"
        assert all(len(set(row)) == K for row in labels)

    def test_allowed_fewer_than_k_pads_with_minus_one(self, index):
        _, q, _ = dataset()
        allowed = LABELS[[5, 500, 2500]]
        scores, labels = index.search(q[:3], K, params=self.full_effort, allowed=allowed)
        assert np.isin(labels[:, :3], allowed).all()
        assert (labels[:, 3:] == -1).all() and np.isneginf(scores[:, 3:]).all()

    def test_save_load_round_trip_gives_same_results(self, index, tmp_path):
        _, q, _ = dataset()
        path = tmp_path / "index.bin"
        index.save(path)
        again = new_index(self.config, DIM, self.precision)
        again.load(path)
        s1, l1 = index.search(q, K)
        s2, l2 = again.search(q, K)
        np.testing.assert_array_equal(l1, l2)
        np.testing.assert_allclose(s1, s2)
        assert again.nbytes() == index.nbytes()

    def test_nbytes_positive(self, index):
        assert index.nbytes() > 0

    def test_search_params_override(self, index):
        _, q, truth = dataset()
        low = recall(index.search(q, K, params=self.low_effort)[1], truth)
        high = recall(index.search(q, K, params=self.full_effort)[1], truth)
        assert high >= low
        with pytest.raises(ConfigError, match="search params"):
            index.search(q, K, params={"no_such_knob": 1})

    def test_search_one_equals_a_one_row_search(self, index):
        _, q, _ = dataset()
        for v in q[:5]:
            labels, scores = index.search_one(v, K)
            s, lb = index.search(v[None, :], K)
            assert labels == lb[0].tolist()
            np.testing.assert_allclose(scores, s[0], rtol=1e-6)
        # a non-contiguous or float64 query takes the general path and gives the same answer
        wide = np.repeat(q[:1], 2, axis=1)[0, ::2]
        assert index.search_one(wide, K)[0] == index.search_one(np.ascontiguousarray(q[0]), K)[0]
        assert index.search_one(q[0].astype(np.float64), K)[0] == index.search_one(q[0], K)[0]
        assert index.search_one(q[0].tolist(), K)[0] == index.search_one(q[0], K)[0]

    def test_search_one_pads_with_minus_one_when_k_exceeds_the_index(self, index):
        _, q, _ = dataset()
        labels, scores = index.search_one(q[0], N + 5)
        assert labels[-5:] == [-1] * 5 and all(s == -np.inf for s in scores[-5:])
        found = [x for x in labels if x >= 0]
        assert labels[: len(found)] == found and len(set(found)) == len(found)  # missing ones last, no repeats
        assert all(s == -np.inf for lb, s in zip(labels, scores) if lb < 0)

    def test_labels_are_the_given_int64_labels(self, index):
        _, q, _ = dataset()
        scores, labels = index.search(q, K)
        assert labels.dtype == np.int64 and scores.dtype == np.float32
        assert np.isin(labels, LABELS).all()
        assert (np.diff(scores, axis=1) <= 1e-6).all(), "scores must be best first"

    def test_search_filtered_declares_its_exact_rows_and_agrees_with_search(self, index):
        _, q, _ = dataset()
        allowed = np.sort(np.random.default_rng(3).choice(LABELS, N // 2, replace=False))
        res = index.search_filtered(q, K, self.full_effort or None, allowed)
        assert isinstance(res, FilteredResult)
        assert res.exact_rows.dtype == np.int64 and ((res.exact_rows >= 0) & (res.exact_rows < len(q))).all()
        assert np.isin(res.labels[res.labels >= 0], allowed).all()
        scores, labels = index.search(q, K, params=self.full_effort or None, allowed=allowed)
        np.testing.assert_array_equal(res.labels, labels)

    def test_filtered_search_params_are_search_params_of_the_kind(self, index):
        _, q, _ = dataset()
        cls = type(index)
        for selectivity in (0.5, 0.01):
            params = cls.filtered_search_params(self.config, K, selectivity)
            assert params is None or isinstance(params, dict)
            index.search(q[:2], K, params=params)  # accepted: no ConfigError

    def test_the_backend_describes_itself(self, index):
        cls = type(index)
        assert self.config.kind in cls.kinds and self.precision in cls.kinds[self.config.kind].precisions
        assert self.config.device in cls.devices and cls.suffix.isalnum()
