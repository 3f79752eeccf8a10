"""The corpus capacity model: bytes per vector per kind, shards onto machines, $ per month, embedding time."""

from __future__ import annotations

import pytest

from ragcost.cost.capacity import EMBED_PER_SECOND, index_structure_bytes, plan_corpus
from ragcost.cost.storage import exact_copy_bytes
from ragcost.errors import ConfigError
from ragcost.index.sizes import hnswlib_bytes_per_vector, pgvector_hnsw_bytes_per_vector

GIB = 2**30


def test_pgvector_hnsw_packs_four_384d_elements_per_8k_page():
    # element 72 + 8 + 1536 = 1616 B, level-0 neighbours 4 + 2 x 16 x 6 -> 200 B: 4 per page (measured 2,048.4 B at 20k)
    assert pgvector_hnsw_bytes_per_vector(384, 16) == pytest.approx(2048, rel=0.01)
    assert pgvector_hnsw_bytes_per_vector(384, 16, "float16") < pgvector_hnsw_bytes_per_vector(384, 16) * 0.6


def test_hnswlib_per_vector_is_level0_plus_bookkeeping():
    # bookkeeping (issue 24, measured on load): pointer 8, level 4, lock 40, visited list 2, label map 40,
    # a malloc header per element with upper levels (16 / M)
    assert hnswlib_bytes_per_vector(384, 16) == pytest.approx(384 * 4 + 12 + 128 + 68 / 15 + 95)


def test_ivf_pq_is_codes_and_ids_plus_centroids_and_codebooks():
    n = 1_000_000
    fixed = 4000 * 384 * 4 + 256 * 384 * 4  # auto nlist = 4 sqrt(n)
    assert index_structure_bytes(n, 384, "ivf_pq", pq_m=48) == n * 56 + fixed


def test_shards_fill_machines_replicas_multiply_and_dollars_follow():
    p = plan_corpus(100_000_000, 384, "hnsw", shards=32, replicas=2, instance_ram_bytes=64 * GIB, usd_per_hour=0.5,
                    vcpus=8)
    assert p.vectors_per_shard == 3_125_000
    assert p.ram_bytes == p.index_bytes  # hnswlib holds the float32 vectors: no exact-scan copy in RAM
    assert p.shards_per_machine == int(64 * GIB * 0.8 // p.ram_bytes) == 9
    assert p.machines == 4 * 2 and p.usd_per_month == pytest.approx(8 * 0.5 * 730)
    assert p.workers == 8 * 4 and p.embed_seconds == pytest.approx(100_000_000 / (EMBED_PER_SECOND * 32))


def test_ivf_pq_and_pgvector_count_the_exact_scan_copy_in_ram():
    for kind in ("ivf_pq", "pgvector-hnsw"):
        p = plan_corpus(1_000_000, 384, kind, 1, 1, 64 * GIB, 0.5, pq_m=48)
        assert p.ram_bytes == p.index_bytes + exact_copy_bytes(1_000_000, 384)


def test_a_shard_larger_than_the_machine_names_the_shards_needed():
    with pytest.raises(ConfigError, match=r"a shard needs 165\.\d GiB .* 51\.2 GiB usable .*use --shards 4 or more"):
        plan_corpus(100_000_000, 384, "hnsw", 1, 1, 64 * GIB, 0.5)


class TestHnswlibAsLoaded:
    """Issue 24: query charges hnswlib what it allocates once loaded, and plan charges the same per vector."""

    def test_plan_gives_the_bytes_per_vector_query_charges(self, tmp_path):
        import numpy as np

        from ragcost.config.index import IndexConfig
        from ragcost.cost.capacity import index_structure_bytes
        from ragcost.index import index_registry

        n, dim, M = 3000, 32, 8
        x = np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        cfg = IndexConfig(backend="hnswlib", kind="hnsw", build={"M": M, "ef_construction": 32})
        built = index_registry.get("hnswlib")(cfg, dim)
        built.build(x, np.arange(n, dtype=np.int64))
        built.save(tmp_path / "i.bin")
        loaded = index_registry.get("hnswlib")(cfg, dim)
        loaded.load(tmp_path / "i.bin")
        query = loaded.nbytes()
        assert query == built.nbytes()
        # plan's expected upper levels against the file's measured ones: the same formula, within 1%
        assert index_structure_bytes(n, dim, "hnsw", M=M) == pytest.approx(query, rel=0.01)
        assert query > 65536 * 40  # the label locks hnswlib allocates once per index are charged
