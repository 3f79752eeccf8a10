"""`ragcost validate` checks everything `ragcost index` would check before reading the source."""

from __future__ import annotations

import pytest

from ragcost.errors import ConfigError, FingerprintError
from ragcost.runtime.pipeline import Pipeline
from tests.cli.conftest import run_cli, write_corpus, write_pipeline


def test_the_default_chunking_fits_the_default_model(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path, chunking={"overlap": 32})
    pipe = Pipeline.load(p)
    assert pipe.chunking() == (254, 32)  # all-MiniLM-L6-v2 reads 256 tokens, two of them special
    pipe.close()
    assert run_cli(capsys, "index", p)[0] == 0


@pytest.mark.parametrize("override, where, match", [
    ({"chunking": {"size": 300, "overlap": 32}}, "chunking", r"chunking.size 300 is larger than the model's window of 254"),
    ({"source": {"path": "kb.jsonl", "reader": "xml"}}, "reader", r"source.reader 'xml' is unknown; installed: .*jsonl"),
    ({"embed": {"model": "no-such-model-folder"}}, None, r"embed.model 'no-such-model-folder' is neither a local model folder"),
    ({"store": "mysql+nodriver://x@127.0.0.1/db"}, "store", r"store 'mysql\+nodriver://x@127.0.0.1/db' cannot be used"),
    ({"store": "notaurl"}, "store", r"store 'notaurl' cannot be used"),
])
def test_validate_refuses_what_index_would_refuse_before_reading_the_source(tmp_path, capsys, override, where, match):
    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path, **override)
    code, _, err = run_cli(capsys, "validate", p)
    assert code == 1 and err.count("\n") == 1, err
    assert __import__("re").search(match, err), err
    if where:
        assert f"{p}:" in err  # file:line:col
    assert not (tmp_path / "kb.duckdb").exists(), "validate must not create the store"


def test_changing_the_chunking_without_reindexing_is_refused_like_dim(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path, chunking={"size": 64, "overlap": 8})
    assert run_cli(capsys, "index", p)[0] == 0
    write_pipeline(tmp_path, chunking={"size": 48, "overlap": 8})
    pipe = Pipeline.load(p)
    try:
        with pytest.raises(FingerprintError, match=r"chunking.size: 64 -> 48.*ragcost index"):
            pipe.artifact()
    finally:
        pipe.close()


def test_an_overlap_as_large_as_the_default_size_is_refused(tmp_path):
    write_corpus(tmp_path / "kb.jsonl")
    pipe = Pipeline.load(write_pipeline(tmp_path, chunking={"overlap": 300}))
    with pytest.raises(ConfigError, match=r"chunking.overlap 300 must be smaller than the chunk size 254"):
        pipe.chunking()


def test_validate_deep_rehashes_the_index_files_and_names_a_damaged_one(tmp_path, capsys):
    import json
    import os

    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path)
    assert run_cli(capsys, "index", p)[0] == 0
    assert run_cli(capsys, "validate", p, "--deep")[0] == 0
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    vec = tmp_path / "index" / manifest["vectors_file"]
    st = vec.stat()
    data = bytearray(vec.read_bytes())
    data[-8:] = b"\x7f" * 8  # same size, same mtime: only a checksum sees it
    vec.write_bytes(bytes(data))
    os.utime(vec, ns=(st.st_atime_ns, st.st_mtime_ns))
    code, _, err = run_cli(capsys, "validate", p, "--deep")
    assert code == 1 and err.count("\n") == 1 and manifest["vectors_file"] in err and "ragcost index" in err, err
