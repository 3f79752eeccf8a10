"""`ragcost index` and `ragcost query` with the store, the pgvector index and the ledger all in one
PostgreSQL database (scripts/start_pgvector.sh)."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.cli.conftest import run_cli, write_corpus, write_pipeline

HNSW = {"backend": "pgvector", "kind": "hnsw", "build": {"m": 8, "ef_construction": 32}, "search": {"ef_search": 40}}


@pytest.fixture
def pg_kb(tmp_path, pgvector_url):
    """The tiny KB pipeline with store: on the pgvector database, in a collection of its own."""
    write_corpus(tmp_path / "kb.jsonl")
    name = f"kb_{uuid.uuid4().hex[:8]}"
    return write_pipeline(tmp_path, name=name, store=pgvector_url, index=HNSW), name


def _one_query(capsys, p, *args):
    code, out, err = run_cli(capsys, "query", str(p), *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_index_and_query_with_store_index_and_ledger_in_one_postgresql(pg_kb, pgvector_url, capsys):
    import psycopg

    from ragcost.index.pg_sql import libpq_url

    p, name = pg_kb
    code, out, err = run_cli(capsys, "index", p)
    assert code == 0, err
    assert "12 embedded" in out
    res = _one_query(capsys, p, "how do I get my money back?", "-k", "3")
    assert res["queries"][0]["hits"][0]["doc_id"] == "kb-1"
    res = _one_query(capsys, p, "billing question", "-k", "3", "--filter",
                     '{"tags": {"$in": ["billing"]}, "year": {"$gte": 2024}}')
    assert {h["doc_id"] for h in res["queries"][0]["hits"]} == {"kb-3", "kb-7"}
    with psycopg.connect(libpq_url(pgvector_url)) as conn:
        cols = [r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND column_name LIKE 'rc_vec_%%'",
            (f"rc_{name}_chunks",))]
        assert len(cols) == 1, cols  # the vectors live in the store's own chunk table
        filled = conn.execute(f'SELECT count("{cols[0]}"), count(*) FROM "rc_{name}_chunks"').fetchone()
        assert filled[0] == filled[1] > 0
        kinds = {r[0] for r in conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s", (f"rc_{name}_chunks",))}
        assert any("USING hnsw" in k and "vector_ip_ops" in k and "m='8'" in k for k in kinds), kinds
        ledger = conn.execute("SELECT count(*) FROM rc_ledger_queries").fetchone()[0]
        assert ledger >= 2  # the ledger in the same database
    code, out, _ = run_cli(capsys, "index", p)
    assert code == 0 and "0 embedded" in out  # unchanged corpus: the built column is reused


def test_pgvector_with_a_duckdb_store_is_refused_at_load_with_the_line(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path, index=HNSW)
    code, _, err = run_cli(capsys, "validate", p)
    assert code != 0
    assert "kb.yaml:" in err and "index backend 'pgvector' keeps its vectors in the store's database, which must be " \
        "postgresql, not duckdb" in err
