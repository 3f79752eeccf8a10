"""`index: {shards: N}`: `ragcost index` builds N HNSW graphs here, `ragcost query` searches them and merges.
(Under `executor: ray` the graphs are built by Ray tasks: tests/runtime/test_ray_executor.py.)"""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.conftest import DOCS, run_cli, write_corpus, write_pipeline

HNSW = {"backend": "hnswlib", "kind": "hnsw", "build": {"M": 8, "ef_construction": 64}, "search": {"ef": 32}}


@pytest.fixture
def corpus(tmp_path):
    write_corpus(tmp_path / "kb.jsonl")
    return tmp_path


def _hits(capsys, pipeline, *args) -> list[dict]:
    code, out, err = run_cli(capsys, "query", pipeline, *args, "--json")
    assert code == 0, err
    return json.loads(out)["queries"][0]["hits"]


def test_a_sharded_index_is_built_queried_filtered_and_rebuilt_when_the_count_changes(corpus, capsys):
    p = write_pipeline(corpus, index={**HNSW, "shards": 3})
    code, out, err = run_cli(capsys, "index", p)
    assert code == 0, err
    assert f"index built: hnswlib/hnsw in 3 shards, {len(DOCS)} vectors" in out
    manifest = json.loads((corpus / "index" / "manifest.json").read_text())
    assert manifest["shards"] == 3 and manifest["fingerprint"]["shards"] == 3
    assert _hits(capsys, p, "how do I get my money back?", "-k", "1")[0]["doc_id"] == "kb-1"
    hits = _hits(capsys, p, "billing question", "-k", "3", "--filter",
                 '{"tags": {"$in": ["billing"]}, "year": {"$gte": 2024}}')
    assert {h["doc_id"] for h in hits} == {"kb-3", "kb-7"}  # only two documents match
    assert "index up to date" in run_cli(capsys, "index", p)[1]

    p = write_pipeline(corpus, index=HNSW)  # no shards: the 3-shard artifact is not served
    code, _, err = run_cli(capsys, "query", p, "refund")
    assert code == 1 and "shards: 3 -> (none)" in err and "ragcost index" in err and "\n" not in err.strip()
    code, out, err = run_cli(capsys, "index", p)
    assert code == 0 and f"index built: hnswlib/hnsw, {len(DOCS)} vectors" in out, err
    assert json.loads((corpus / "index" / "manifest.json").read_text())["shards"] == 1


@pytest.mark.parametrize("index, match", [
    ({**HNSW, "shards": 0}, r"index.shards: a shard count is 1 \(one graph\) or more; set shards: 1 or more, or remove it \(got 0\)"),
    ({"backend": "faiss", "kind": "flat", "shards": 2}, r"shards: 2: backend faiss kind flat is built as one index.*remove shards or use kind: hnsw"),
])
def test_bad_shards_are_one_line_naming_file_and_field(corpus, capsys, index, match):
    p = write_pipeline(corpus, index=index)
    code, _, err = run_cli(capsys, "validate", p)
    assert code == 1 and f"{p}:" in err and len(err.strip().splitlines()) == 1
    assert re.search(match, err), err


def test_more_shards_than_vectors_is_one_line_with_the_fix(corpus, capsys):
    p = write_pipeline(corpus, index={**HNSW, "shards": 50})
    code, _, err = run_cli(capsys, "index", p)
    errors = [line for line in err.splitlines() if line.startswith("error:")]  # the rest is embedding progress
    assert code == 1 and len(errors) == 1 and "Traceback" not in err
    assert f"index shards: 50 is more than the {len(DOCS)} vectors to index" in err and f"at most {len(DOCS)}" in err


@pytest.mark.parametrize("executor, index, shards", [
    ({}, HNSW, 1),  # local: one graph unless asked
    ({"executor": "ray", "ray": {"workers": 3}}, HNSW, 3),  # ray: one graph per worker
    ({"executor": "ray", "ray": {"workers": 3}}, {**HNSW, "shards": 1}, 1),  # ... unless index shards says
    ({"executor": "ray", "ray": {"workers": 3}}, {"backend": "faiss", "kind": "ivf_flat"}, 1),  # IVF merges into one
])
def test_the_shard_count_a_pipeline_builds_and_fingerprints(corpus, executor, index, shards):
    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(write_pipeline(corpus, index=index, **executor))
    try:
        assert pipe.index_shards() == shards
        assert pipe.index_fingerprint("r").get("shards") == (shards if shards > 1 else None)
    finally:
        pipe.close()
