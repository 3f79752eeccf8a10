"""A sharded HNSW: N graphs over label ranges searched as one (no Ray here; tests/runtime builds on Ray)."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.config.index import IndexConfig
from ragcost.errors import ConfigError
from ragcost.index import (
    ShardedIndex,
    build_index,
    check_config,
    exact_search,
    index_class,
    index_registry,
    new_index,
    open_artifact,
    write_artifact,
)
from ragcost.index.sharded import can_shard, check_shards, check_shards_fit, merge_top_k
from tests.conftest import clustered_vectors
from ragcost.testing.index import DIM, K, LABELS, N, IndexContract, dataset, recall
from tests.index.test_contract import HNSW_EFFORT


def _cfg(backend: str = "hnswlib", kind: str = "hnsw", **kw) -> IndexConfig:
    return IndexConfig(backend=backend, kind=kind, **kw)


class TestShardedHnswlib(IndexContract):
    config = _cfg(shards=3)
    low_effort, full_effort = HNSW_EFFORT


class TestShardedFaissHnsw(IndexContract):
    config = _cfg("faiss", shards=2)
    low_effort, full_effort = HNSW_EFFORT


# ---- what the shards are ------------------------------------------------------------------


class TestShardsHoldTheLabelsOnce:
    def test_each_shard_is_the_backends_own_index_over_a_contiguous_label_range(self):
        x, _, _ = dataset()
        index = build_index(_cfg(shards=4), x, LABELS[::-1].copy())  # unsorted on purpose
        assert isinstance(index, ShardedIndex) and len(index.shards) == 4
        assert all(type(s) is index_registry.get("hnswlib") for s in index.shards)
        held = [np.sort(np.asarray(s._index.get_ids_list(), np.int64)) for s in index.shards]
        assert sorted(len(h) for h in held) == [N // 4] * 4
        assert np.array_equal(np.concatenate(held), LABELS)  # every label exactly once, in range order
        assert all(a[-1] < b[0] for a, b in zip(held, held[1:]))

    def test_size_is_the_sum_of_the_shards(self):
        x, _, _ = dataset()
        index = build_index(_cfg(shards=3), x, LABELS)
        assert index.nbytes() == sum(s.nbytes() for s in index.shards) > 0
        assert len(index) == sum(len(s) for s in index.shards) == N

    def test_one_shard_is_the_plain_backend(self):
        assert index_class(_cfg(shards=1)) is index_class(_cfg()) is index_registry.get("hnswlib")
        assert type(new_index(_cfg(), DIM)) is index_registry.get("hnswlib")


# ---- merging -------------------------------------------------------------------------------


def test_merge_of_per_shard_exact_results_is_the_exact_top_k():
    x, q, _ = dataset()
    parts = np.array_split(np.arange(N), 3)
    per_shard = [exact_search(x[p], LABELS[p], q, K) for p in parts]
    scores, labels = merge_top_k([s for s, _ in per_shard], [lb for _, lb in per_shard], K)
    want_s, want_l = exact_search(x, LABELS, q, K)
    np.testing.assert_array_equal(labels, want_l)
    np.testing.assert_allclose(scores, want_s, rtol=1e-6)


def test_merge_orders_by_score_then_label_and_pads_missing_last():
    s = [np.array([[0.9, -np.inf]], np.float32), np.array([[0.5, 0.9]], np.float32)]
    lb = [np.array([[7, -1]]), np.array([[2, 3]])]
    scores, labels = merge_top_k(s, lb, 5)
    assert labels.tolist() == [[3, 7, 2, -1, -1]]
    assert scores[0, :3].tolist() == pytest.approx([0.9, 0.9, 0.5]) and np.isneginf(scores[0, 3:]).all()


@pytest.mark.parametrize("shards", [2, 4])
def test_sharded_recall_is_no_worse_than_one_graph_at_the_same_ef(shards, record_property):
    x, _ = clustered_vectors(8000, 48, seed=11)
    labels = np.arange(len(x), dtype=np.int64) * 3
    rng = np.random.default_rng(12)
    q = x[rng.choice(len(x), 200, replace=False)] + 0.1 * rng.standard_normal((200, 48)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    _, truth = exact_search(x, labels, q, K)
    build, ef = {"M": 8, "ef_construction": 40}, {"ef": 12}  # a small graph, so one graph misses some
    one = build_index(_cfg(build=build, search=ef), x, labels)
    many = build_index(_cfg(build=build, search=ef, shards=shards), x, labels)
    r_one, r_many = recall(one.search(q, K)[1], truth), recall(many.search(q, K)[1], truth)
    record_property("recall", {"one": r_one, "sharded": r_many})
    assert r_one < 1.0  # the comparison means something
    assert r_many >= r_one - 0.02, (r_one, r_many)


def test_a_shard_with_fewer_than_k_vectors_pads_with_minus_one():
    x, _ = clustered_vectors(7, 16, seed=2)
    labels = np.array([3, 9, 12, 20, 21, 40, 41], np.int64)
    index = build_index(_cfg(shards=3), x, labels)
    assert [len(s) for s in index.shards] == [2, 2, 3]
    scores, found = index.search(x[:2], 10)
    assert sorted(found[0, :7].tolist()) == labels.tolist() and (found[:, 7:] == -1).all()
    assert np.isneginf(scores[:, 7:]).all() and np.isfinite(scores[:, :7]).all()
    one_l, one_s = index.search_one(x[0], 10)
    assert one_l == found[0].tolist() and one_s[7:] == [-np.inf] * 3
    top_l, _ = index.search_one(x[0], 4)  # k below the total but above some shards' size
    assert top_l == found[0, :4].tolist() and top_l[0] == 3


# ---- filtered search ------------------------------------------------------------------------


class TestFilteredSearchAcrossShards:
    @pytest.fixture(scope="class")
    def index(self):
        x, _, _ = dataset()
        return build_index(_cfg(shards=3, search={"ef": 400}), x, LABELS)

    def test_results_are_the_exact_filtered_top_k_when_ef_covers_it(self, index):
        x, q, _ = dataset()
        allowed = np.sort(np.random.default_rng(5).choice(LABELS, 600, replace=False))
        res = index.search_filtered(q, K, None, allowed)
        rows = np.flatnonzero(np.isin(LABELS, allowed))
        _, want = exact_search(x, LABELS, q, K, rows=rows)
        assert np.isin(res.labels, allowed).all()
        assert recall(res.labels, want) >= 0.99

    def test_a_shard_holding_no_allowed_label_is_not_walked(self, index, monkeypatch):
        _, q, _ = dataset()
        allowed = LABELS[:50]  # all in the first shard's range

        def refuse(*a, **kw):
            raise AssertionError("walked a shard that holds no allowed label")

        for shard in index.shards[1:]:
            monkeypatch.setattr(shard, "search_filtered", refuse)
        labels = index.search(q[:5], K, allowed=allowed)[1]
        assert np.isin(labels, allowed).all() and (labels >= 0).all()

    def test_a_row_one_shard_scored_exactly_is_reported_exact(self, index, monkeypatch):
        _, q, _ = dataset()
        allowed = LABELS[::3]
        shard = index.shards[1]
        real = shard.search_filtered

        def fell_back_on_row_2(queries, k, params, mine):
            got = real(queries, k, params, mine)
            return got._replace(exact_rows=np.array([2], np.int64))

        monkeypatch.setattr(shard, "search_filtered", fell_back_on_row_2)
        res = index.search_filtered(q[:4], K, None, allowed)
        assert res.exact_rows.tolist() == [2]
        assert index.search_filtered(q[:4], K, None, allowed[::-1].copy()).labels.tolist() == res.labels.tolist()

    def test_an_empty_allowed_set_is_all_padding(self, index):
        _, q, _ = dataset()
        scores, labels = index.search(q[:2], K, allowed=np.array([5], np.int64))  # 5 is no stored label
        assert (labels == -1).all() and np.isneginf(scores).all()
        with pytest.raises(ConfigError, match="search params"):
            index.search(q[:2], K, params={"no_such_knob": 1}, allowed=np.array([5], np.int64))


# ---- persistence ----------------------------------------------------------------------------

FP = {"model": "m", "dim": DIM, "build": {"M": 16, "ef_construction": 200}, "corpus_revision": 1, "shards": 3}


def test_artifact_records_the_shards_and_opens_them_again(tmp_path):
    x, q, _ = dataset()
    cfg = _cfg(shards=3)
    index = build_index(cfg, x, LABELS)
    manifest = write_artifact(tmp_path, index, LABELS, x, FP, 1.0)
    assert manifest.shards == 3 and manifest.index_file.endswith(".shards")
    assert manifest.index_bytes == sum(s.nbytes() for s in index.shards)
    # Opened by a config that does not say shards (as a restart under executor: ray would): the file's count.
    loaded = open_artifact(tmp_path, _cfg(), FP, "rebuild")
    assert isinstance(loaded.index, ShardedIndex) and len(loaded.index.shards) == 3
    s1, l1 = index.search(q, K)
    s2, l2 = loaded.index.search(q, K)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_allclose(s1, s2)
    assert loaded.index.nbytes() == index.nbytes()


def test_an_unsharded_artifact_says_one_shard(tmp_path):
    x, _, _ = dataset()
    manifest = write_artifact(tmp_path, build_index(_cfg(), x, LABELS), LABELS, x, FP, 1.0)
    assert manifest.shards == 1 and not isinstance(open_artifact(tmp_path, _cfg(), FP, "r").index, ShardedIndex)


def test_loading_another_backends_shards_is_refused(tmp_path):
    from ragcost.errors import FingerprintError

    x, _, _ = dataset()
    build_index(_cfg(shards=2), x, LABELS).save(tmp_path / "i.shards")
    with pytest.raises(FingerprintError, match="holds hnswlib/hnsw shards, not faiss/hnsw"):
        new_index(_cfg("faiss", shards=2), DIM).load(tmp_path / "i.shards")
    (tmp_path / "bad.shards").write_bytes(b"not a zip")
    with pytest.raises(FingerprintError, match="not a sharded index file"):
        new_index(_cfg(shards=2), DIM).load(tmp_path / "bad.shards")


# ---- bad input ------------------------------------------------------------------------------


def test_shards_on_a_kind_that_is_not_sharded_names_the_field_and_fix():
    with pytest.raises(ConfigError, match="shards: 2: backend faiss kind ivf_flat is built as one index.*use kind: hnsw") as err:
        check_config(_cfg("faiss", "ivf_flat", shards=2))
    assert err.value.field == ("shards",) and "\n" not in str(err.value)


def test_only_kinds_a_backend_declares_shardable_are_sharded():
    assert can_shard(_cfg()) and can_shard(_cfg("faiss")) and not can_shard(_cfg("faiss", "ivf_flat"))
    assert not can_shard(_cfg("pgvector"))  # pgvector's hnsw lives in the store's database: one index there
    with pytest.raises(ConfigError, match="backend pgvector kind hnsw is built as one index.*use backend: hnswlib or faiss"):
        check_shards(_cfg("pgvector", shards=2))


def test_shards_zero_is_refused_by_the_model():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="set shards: 1 or more"):
        _cfg(shards=0)


def test_more_shards_than_vectors_is_one_line_with_the_fix():
    x, _ = clustered_vectors(3, 16, seed=1)
    with pytest.raises(ConfigError, match=r"index shards: 4 is more than the 3 vectors to index .*at most 3"):
        build_index(_cfg(shards=4), x, np.arange(3))
    check_shards_fit(3, 3)  # one vector a shard is enough
