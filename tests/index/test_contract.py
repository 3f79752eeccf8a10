"""Every built-in backend/kind/precision inherits the VectorIndex contract; exact search and artifacts."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ragcost.config.index import IndexConfig
from ragcost.errors import ConfigError, DependencyError, FingerprintError
from ragcost.index import (
    build_index,
    exact_search,
    index_registry,
    open_artifact,
    read_manifest,
    rows_for_labels,
    write_artifact,
)
from ragcost.index.verify import VERIFIED
from tests.conftest import clustered_vectors
from ragcost.testing.index import DIM, K, LABELS, N, IndexContract, dataset, recall  # noqa: F401


def _cfg(backend: str, kind: str, **kw) -> IndexConfig:
    return IndexConfig(backend=backend, kind=kind, **kw)


HNSW_EFFORT = ({"ef": 10}, {"ef": 400})
IVF_EFFORT = ({"nprobe": 1}, {"nprobe": 10**6})  # faiss clamps nprobe to nlist


class TestHnswlib(IndexContract):
    config = _cfg("hnswlib", "hnsw")
    low_effort, full_effort = HNSW_EFFORT


class TestFaissFlat(IndexContract):
    config = _cfg("faiss", "flat")

    def test_flat_returns_exact_top_k(self, index):
        x, q, truth = dataset()
        scores, labels = index.search(q, K)
        # Sets, not order: near-equal scores may swap under a different BLAS summation order.
        assert recall(labels, truth) == 1.0
        np.testing.assert_allclose(scores, exact_search(x, LABELS, q, K)[0], rtol=1e-5, atol=1e-5)


class TestFaissFlatFloat16(IndexContract):
    config, precision, min_recall = _cfg("faiss", "flat"), "float16", 0.98  # measured 0.998


class TestFaissFlatInt8(IndexContract):
    config, precision, min_recall = _cfg("faiss", "flat"), "int8", 0.95  # measured 0.98


class TestFaissFlatBinary(IndexContract):
    # 64 sign bits keep little of a 64-d vector: measured 0.29; binary is a first stage before rescoring.
    config, precision, min_recall = _cfg("faiss", "flat"), "binary", 0.2


class TestFaissHnsw(IndexContract):
    config = _cfg("faiss", "hnsw")
    low_effort, full_effort = HNSW_EFFORT


class TestFaissHnswInt8(IndexContract):
    config, precision, min_recall = _cfg("faiss", "hnsw"), "int8", 0.95  # measured 0.98
    low_effort, full_effort = HNSW_EFFORT


class TestFaissHnswBinary(IndexContract):
    config, precision, min_recall = _cfg("faiss", "hnsw"), "binary", 0.2  # measured 0.28
    low_effort, full_effort = HNSW_EFFORT


class TestFaissIvfFlat(IndexContract):
    config = _cfg("faiss", "ivf_flat")
    low_effort, full_effort = IVF_EFFORT


class TestFaissIvfFlatFloat16(IndexContract):
    config, precision, min_recall = _cfg("faiss", "ivf_flat"), "float16", 0.98  # measured 1.0
    low_effort, full_effort = IVF_EFFORT


class TestFaissIvfPq(IndexContract):
    # 16 x 8-bit codes (16 bytes/vector) trained on 3000 points: measured 0.71.
    config, min_recall = _cfg("faiss", "ivf_pq", build={"m": 16, "nbits": 8}, threads=1), 0.6
    low_effort, full_effort = IVF_EFFORT


# ---- precision, build parameters, device -----------------------------------------


def test_hnswlib_int8_precision_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="hnswlib stores float32 only; use backend: faiss"):
        index_registry.get("hnswlib")(_cfg("hnswlib", "hnsw"), 64, "int8")


def test_ivf_pq_with_other_precision_is_refused_naming_the_combination():
    with pytest.raises(ConfigError, match="ivf_pq with precision int8"):
        index_registry.get("faiss")(_cfg("faiss", "ivf_pq", build={"m": 8}), 64, "int8")


def test_ivf_pq_m_not_dividing_dim_names_m_dim_and_divisors():
    with pytest.raises(ConfigError, match=r"build.m: 48 does not divide dim 100; use one of \[1, 2, 4, 5"):
        index_registry.get("faiss")(_cfg("faiss", "ivf_pq", build={"m": 48}), 100)


def test_ivf_pq_384d_m48_nbits8_costs_about_56_bytes_per_vector():
    n, dim, nlist = 4000, 384, 32
    x, _ = clustered_vectors(n, dim, seed=3)
    cfg = _cfg("faiss", "ivf_pq", build={"m": 48, "nbits": 8, "nlist": nlist}, threads=1)
    index = build_index(cfg, x, np.arange(n))
    # Fixed cost: coarse centroids and the PQ codebooks, amortised over n; the rest is per vector.
    fixed = nlist * dim * 4 + 48 * 256 * (dim // 48) * 4
    per_vector = (index.nbytes() - fixed) / n
    assert 48 + 8 <= per_vector <= 64, per_vector  # 48 code bytes + 8-byte id, plus list overhead
    assert index.nbytes() / n < 64 + fixed / n + 1


def test_few_training_points_warn_and_reduce_nbits():
    x, _ = clustered_vectors(500, 16, seed=4)
    coarse = build_index(_cfg("faiss", "ivf_pq", build={"m": 4, "nbits": 8}, threads=1), x, np.arange(500))
    assert any("wants >= 9984 training points, got 500; codes will be coarse" in w for w in coarse.warnings)
    tiny = build_index(_cfg("faiss", "ivf_pq", build={"m": 4, "nbits": 8}, threads=1), x[:200], np.arange(200))
    assert any("using nbits=7" in w for w in tiny.warnings)
    assert (tiny.search(x[:5], 3)[1] >= 0).all()


def test_explicit_nlist_too_large_for_the_data_warns_and_shrinks():
    x, _ = clustered_vectors(400, 16, seed=5)
    index = build_index(_cfg("faiss", "ivf_flat", build={"nlist": 1024}), x, np.arange(400))
    assert any("nlist=1024" in w and "using nlist=10" in w for w in index.warnings)


def test_device_gpu_without_faiss_gpu_names_the_install():
    faiss = pytest.importorskip("faiss")
    if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        pytest.skip("a GPU is present")
    with pytest.raises(DependencyError, match=r"pip install 'ragcost\[gpu\]'.*device: cpu"):
        index_registry.get("faiss")(_cfg("faiss", "flat", device="gpu"), 64)


# ---- exact search -----------------------------------------------------------------


def test_exact_search_breaks_ties_by_label_and_pads():
    vectors = np.array([[1, 0], [1, 0], [0, 1], [1, 0]], dtype=np.float32)
    labels = np.array([9, 3, 4, 5], dtype=np.int64)
    scores, found = exact_search(vectors, labels, np.array([[1, 0]], np.float32), 2)
    assert found.tolist() == [[3, 5]] and scores.tolist() == [[1.0, 1.0]]
    scores, found = exact_search(vectors, labels, np.array([[1, 0]], np.float32), 6)
    assert found.tolist() == [[3, 5, 9, 4, -1, -1]] and np.isneginf(scores[0, 4:]).all()


@pytest.mark.parametrize("nq", [1, 5, 40])  # 40: above the by-index kernel's query limit, the numpy path
@pytest.mark.parametrize("n_rows", [3, 400])
def test_scan_rows_equals_exact_search_over_the_same_rows(nq, n_rows, tmp_path):
    from ragcost.index.exact import scan_rows

    x, q, _ = dataset()
    np.save(tmp_path / "v.npy", x)
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")  # as the artifact holds them
    rows = np.sort(np.random.default_rng(nq + n_rows).choice(len(x), n_rows, replace=False))
    queries = np.resize(q, (nq, q.shape[1]))
    s1, l1 = scan_rows(mapped, LABELS, queries, K, rows)
    s2, l2 = exact_search(x, LABELS, queries, K, rows=rows)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_allclose(s1, s2, rtol=1e-5)
    if n_rows < K:
        assert (l1[:, n_rows:] == -1).all() and np.isneginf(s1[:, n_rows:]).all()


def test_exact_search_over_rows_only_sees_those_rows():
    x, q, _ = dataset()
    rows = rows_for_labels(LABELS, LABELS[[7, 70, 700]])
    assert rows.tolist() == [7, 70, 700]
    _, found = exact_search(x, LABELS, q[:4], 2, rows=rows)
    assert np.isin(found, LABELS[[7, 70, 700]]).all()


def test_rows_for_labels_drops_labels_not_present():
    assert rows_for_labels(np.array([2, 4, 8]), np.array([8, 5, 2, 100])).tolist() == [0, 2]


# ---- artifacts --------------------------------------------------------------------

FP = {"model": "all-MiniLM-L6-v2", "model_sha256": "ab12" * 16, "dim": 384, "precision": "float32",
      "build": {"M": 16, "ef_construction": 200}, "corpus_revision": 3}
HINT = "run `ragcost index pipelines/x.yaml` to rebuild"


def _write(directory, seed=0, fp=FP, config=None):
    config = config or _cfg("hnswlib", "hnsw")
    x, _ = clustered_vectors(300, 32, seed=seed)
    labels = np.arange(300)[::-1] * 11  # unsorted on purpose: the artifact stores them sorted
    return write_artifact(directory, build_index(config, x, labels), labels, x, fp, 0.5), x, labels


def test_artifact_write_then_open_round_trip(tmp_path):
    manifest, x, labels = _write(tmp_path)
    loaded = open_artifact(tmp_path, _cfg("hnswlib", "hnsw"), FP, HINT)
    assert loaded.manifest == manifest == read_manifest(tmp_path)
    assert (np.diff(loaded.labels) > 0).all() and loaded.labels.dtype == np.int64
    assert manifest.vector_count == 300 and manifest.dim == 32 and manifest.bytes_per_vector > 32 * 4
    row = rows_for_labels(loaded.labels, labels[:1])[0]
    np.testing.assert_array_equal(loaded.vectors[row], x[0])
    assert loaded.index.search(x[:1], 1)[1][0, 0] == labels[0]


def test_fingerprint_mismatch_names_each_change_and_the_rebuild_hint(tmp_path):
    _write(tmp_path)
    changed = {**FP, "dim": 256, "model_sha256": "cd34" * 16}
    with pytest.raises(FingerprintError) as err:
        open_artifact(tmp_path, _cfg("hnswlib", "hnsw"), changed, HINT)
    message = str(err.value)
    assert "dim: 384 -> 256" in message and "model_sha256: ab12ab12ab12 -> cd34cd34cd34" in message
    assert message.endswith(HINT) and "\n" not in message


def test_opening_with_another_backend_is_refused(tmp_path):
    _write(tmp_path)
    with pytest.raises(FingerprintError, match="backend: hnswlib -> faiss"):
        open_artifact(tmp_path, _cfg("faiss", "flat"), FP, HINT)


def test_missing_artifact_says_how_to_build_it(tmp_path):
    with pytest.raises(FingerprintError, match=r"no index at .*; run `ragcost index"):
        open_artifact(tmp_path / "nothing", _cfg("hnswlib", "hnsw"), FP, HINT)


def test_second_write_removes_the_old_build_and_manifest_stays_valid(tmp_path):
    first, _, _ = _write(tmp_path)
    json.loads((tmp_path / "manifest.json").read_text())
    second, _, _ = _write(tmp_path, seed=1, config=_cfg("faiss", "flat"))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(["manifest.json", VERIFIED, second.index_file, second.vectors_file, second.labels_file])
    assert first.index_file not in files
    assert json.loads((tmp_path / "manifest.json").read_text())["backend"] == "faiss"


def test_crash_before_the_manifest_rename_leaves_the_previous_artifact(tmp_path, monkeypatch):
    first, x, _ = _write(tmp_path)
    real_replace = os.replace

    def crash_on_manifest(src, dst):
        if str(dst).endswith("manifest.json"):
            raise OSError("simulated crash")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_manifest)
    with pytest.raises(OSError, match="simulated crash"):
        _write(tmp_path, seed=1)
    monkeypatch.setattr(os, "replace", real_replace)
    loaded = open_artifact(tmp_path, _cfg("hnswlib", "hnsw"), FP, HINT)
    assert loaded.manifest == first
    assert loaded.index.search(x[:1], 1)[1][0, 0] == 299 * 11  # the first build's vectors, not the crashed one's
    # The next good write sweeps the crashed build's orphans.
    second, _, _ = _write(tmp_path, seed=2)
    assert len(list(tmp_path.iterdir())) == 5 and read_manifest(tmp_path) == second  # 3 files, manifest, VERIFIED
