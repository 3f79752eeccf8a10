"""The pgvector backend inherits the VectorIndex contract, against a real PostgreSQL with pgvector
(scripts/start_pgvector.sh); its bad input is one line each."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragcost.config.index import IndexConfig
from ragcost.errors import ConfigError, DependencyError, FingerprintError
from ragcost.index import build_index, index_registry
from ragcost.testing.index import DIM, K, LABELS, N, IndexContract, dataset, recall

HNSW_EFFORT = ({"ef_search": 10}, {"ef_search": 400})
IVF_EFFORT = ({"probes": 1}, {"probes": 10**4})  # pgvector visits at most every list


def _cfg(kind: str, **kw) -> IndexConfig:
    return IndexConfig(backend="pgvector", kind=kind, **kw)


class PgvectorContract(IndexContract):
    """Each class builds into a table of its own in the session's pgvector database."""

    @pytest.fixture(scope="class")
    def index(self, request, pgvector_url):
        x, _, _ = dataset()
        cls = request.cls
        cls.config.at_store(pgvector_url, f"rc_contract_{cls.__name__.lower()}")
        built = build_index(cls.config, x, LABELS, cls.precision)
        yield built
        built.close()


class TestPgvectorFlat(PgvectorContract):
    config, min_recall = _cfg("flat"), 1.0


class TestPgvectorHnsw(PgvectorContract):
    config = _cfg("hnsw")  # measured 0.97 at ef_search 40
    low_effort, full_effort = HNSW_EFFORT


class TestPgvectorIvfFlat(PgvectorContract):
    config = _cfg("ivf_flat")
    low_effort, full_effort = IVF_EFFORT


class TestPgvectorHnswHalfvec(PgvectorContract):
    config, precision, min_recall = _cfg("hnsw"), "float16", 0.9
    low_effort, full_effort = HNSW_EFFORT


def test_bit_columns_score_minus_hamming_distance_exactly_when_flat(pgvector_url):
    """Binary is not a contract class: 64 sign bits tie so often that which tied label HNSW returns
    (and so recall, 0.26-0.29) is noise. The scores, though, are exact: minus the Hamming distance."""
    x, q, _ = dataset()
    index = build_index(_cfg("flat").at_store(pgvector_url, "rc_bits"), x, LABELS, "binary")
    scores, labels = index.search(q, K)
    bits, qbits = x > 0, q > 0
    hamming = (qbits[:, None, :] != bits[None, :, :]).sum(axis=2)
    np.testing.assert_array_equal(-scores, np.sort(hamming, axis=1)[:, :K])
    hnsw = build_index(_cfg("hnsw").at_store(pgvector_url, "rc_bits_hnsw"), x, LABELS, "binary")
    assert recall(hnsw.search(q, K, params={"ef_search": 400})[1], labels) >= 0.2
    index.close()
    hnsw.close()


def test_a_selective_filter_still_returns_k_from_the_iterative_scan(pgvector_url):
    """1% allowed, default ef_search 40: the iterative HNSW scan keeps walking until k rows pass."""
    x, q, _ = dataset()
    cfg = _cfg("hnsw").at_store(pgvector_url, "rc_iterative")
    index = build_index(cfg, x, LABELS)
    allowed = np.sort(np.random.default_rng(5).choice(LABELS, N // 100, replace=False))
    res = index.search_filtered(q, K, None, allowed)
    assert (res.labels >= 0).all() and np.isin(res.labels, allowed).all()
    rows = np.searchsorted(LABELS, allowed)
    from ragcost.index import exact_search

    _, truth = exact_search(x, LABELS, q, K, rows=rows)
    assert recall(res.labels, truth) >= 0.95
    index.close()


def test_a_rebuild_writes_a_new_column_and_drops_the_one_before_the_live_one(pgvector_url, tmp_path):
    import psycopg

    from ragcost.index.pg_sql import libpq_url

    x, q, _ = dataset()
    cfg = _cfg("flat").at_store(pgvector_url, "rc_rebuilds")
    first = build_index(cfg, x, LABELS)
    first.save(tmp_path / "first.pgvector")
    second = build_index(cfg, x, LABELS)
    third = build_index(cfg, x, LABELS)
    with psycopg.connect(libpq_url(pgvector_url)) as conn:
        cols = [r[0] for r in conn.execute("SELECT column_name FROM information_schema.columns "
                                           "WHERE table_name = 'rc_rebuilds' AND column_name LIKE 'rc_vec_%' ORDER BY 1")]
    assert cols == sorted([second._column, third._column])
    assert third.search(q[:2], K)[1].tolist() == second.search(q[:2], K)[1].tolist()
    again = index_registry.get("pgvector")(cfg, DIM)
    with pytest.raises(FingerprintError, match=r"pgvector column rc_vec_\w+ of table rc_rebuilds .* is gone.*ragcost index"):
        again.load(tmp_path / "first.pgvector")
    for ix in (first, second, third):
        ix.close()


def test_the_saved_file_names_table_and_column_but_no_password(pgvector_url, tmp_path):
    x, _, _ = dataset()
    cfg = _cfg("flat").at_store(pgvector_url.replace("postgres@", "postgres:s3cret@"), "rc_saved")
    index = build_index(cfg, x[:50], LABELS[:50])
    index.save(tmp_path / "i.pgvector")
    text = (tmp_path / "i.pgvector").read_text()
    info = json.loads(text)
    assert "s3cret" not in text and info["table"] == "rc_saved" and info["count"] == 50
    index.close()


# ---- bad input: one line each -------------------------------------------------------------


def test_pgvector_missing_from_the_database_says_create_extension_failed_and_why(postgres_url):
    """The plain test server (Debian's PostgreSQL) has no pgvector."""
    x, _, _ = dataset()
    cfg = _cfg("flat").at_store(postgres_url, "rc_no_ext")
    with pytest.raises(DependencyError) as err:
        build_index(cfg, x[:10], LABELS[:10])
    msg = str(err.value)
    assert "CREATE EXTENSION vector failed" in msg and "is not available" in msg and "\n" not in msg
    assert "install it on the database server" in msg


@pytest.mark.parametrize("precision, limit, fix", [("float32", "2,000", "float16"), ("float16", "4,000", "binary")])
def test_a_dim_above_the_index_limit_names_the_limit_and_halfvec_bit(precision, limit, fix):
    dim = 2048 if precision == "float32" else 4096
    with pytest.raises(ConfigError) as err:
        index_registry.get("pgvector")(_cfg("hnsw"), dim, precision)
    msg = str(err.value)
    assert f"index limit of {limit} dims" in msg and f"precision: {fix}" in msg and "halfvec/bit" in msg
    index_registry.get("pgvector")(_cfg("flat"), dim, precision)  # no index, no limit


def test_without_a_postgresql_store_the_backend_says_so():
    x, _, _ = dataset()
    with pytest.raises(ConfigError, match="needs the pipeline's store to be PostgreSQL"):
        build_index(_cfg("flat"), x[:10], LABELS[:10])
    with pytest.raises(ConfigError, match="keeps its vectors in PostgreSQL, but the store is duckdb:///x.duckdb"):
        build_index(_cfg("flat").at_store("duckdb:///x.duckdb", "t"), x[:10], LABELS[:10])


def test_ivfflat_over_bits_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="ivfflat indexes vector and halfvec; use kind: hnsw or flat"):
        index_registry.get("pgvector")(_cfg("ivf_flat"), 64, "binary")


def test_unknown_build_parameter_lists_pgvectors_names():
    with pytest.raises(ConfigError, match="ef_construction|m"):
        index_registry.get("pgvector")(_cfg("hnsw", build={"M": 16}), 64)


def test_ef_construction_below_twice_m_is_refused_before_postgresql_sees_it():
    with pytest.raises(ConfigError, match=r"ef_construction 16 must be at least 2 x m = 32"):
        index_registry.get("pgvector")(_cfg("hnsw", build={"m": 16, "ef_construction": 16}), 64)


@pytest.mark.parametrize("allowed_count", [40, 2500])  # label = ANY($1) up to 2,048 labels, a get_bit bitmap above
def test_both_label_filters_return_exactly_the_allowed_top_k(pgvector_url, allowed_count):
    from ragcost.index import exact_search
    from ragcost.index.pgvector_index import ANY_MAX_LABELS, _label_filter

    x, q, _ = dataset()
    allowed = np.sort(np.random.default_rng(allowed_count).choice(LABELS, allowed_count, replace=False))
    assert ("ANY" in _label_filter(allowed)[0]) == (allowed_count <= ANY_MAX_LABELS)
    index = build_index(_cfg("flat").at_store(pgvector_url, "rc_label_filters"), x, LABELS)
    scores, labels = index.search(q, K, allowed=allowed)
    exact_scores, _ = exact_search(x, LABELS, q, K, rows=np.searchsorted(LABELS, allowed))
    assert np.isin(labels, allowed).all()
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-5, atol=1e-6)  # same ranks (ties may swap labels)
    index.close()
