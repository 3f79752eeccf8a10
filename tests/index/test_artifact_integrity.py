"""Issue 18: a damaged or edited artifact is refused with one line naming the file and the fix."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ragcost.config.index import IndexConfig
from ragcost.errors import FingerprintError
from ragcost.index import build_index, open_artifact, read_manifest, verify_artifact, write_artifact
from ragcost.index import verify as verify_mod
from tests.conftest import clustered_vectors

FP = {"model": "m", "dim": 32, "precision": "float32", "corpus_revision": 1}
HINT = "run `ragcost index pipelines/x.yaml` to rebuild"
CFG = {"hnswlib": dict(backend="hnswlib", kind="hnsw"), "faiss": dict(backend="faiss", kind="flat")}


@pytest.fixture(params=["hnswlib", "faiss"])
def built(request, tmp_path):
    cfg = IndexConfig(**CFG[request.param])
    x, _ = clustered_vectors(200, 32, seed=0)
    labels = np.arange(200, dtype=np.int64) * 3
    manifest = write_artifact(tmp_path, build_index(cfg, x, labels), labels, x, FP, 0.1)
    return tmp_path, cfg, manifest, x


def _open(folder, cfg):
    return open_artifact(folder, cfg, FP, HINT)


def _garble_same_size(path, offset_from_end=64):
    data = bytearray(path.read_bytes())
    for i in range(len(data) - offset_from_end, len(data)):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _one_line(err, *parts):
    msg = str(err.value)
    assert "\n" not in msg and msg.endswith(HINT), msg
    for p in parts:
        assert p in msg, msg


def test_a_same_size_garbled_vectors_file_is_refused_naming_it_and_the_fix(built):
    folder, cfg, m, _ = built
    _garble_same_size(folder / m.vectors_file)
    with pytest.raises(FingerprintError, match="checksum differs") as e:
        _open(folder, cfg)
    _one_line(e, m.vectors_file)


def test_a_garbled_labels_file_is_refused(built):
    folder, cfg, m, _ = built
    _garble_same_size(folder / m.labels_file, 16)
    with pytest.raises(FingerprintError) as e:
        _open(folder, cfg)
    _one_line(e, m.labels_file)


def test_a_reordered_labels_file_is_refused(built):
    folder, cfg, m, _ = built
    labels = np.load(folder / m.labels_file)
    with open(folder / m.labels_file, "wb") as f:
        np.save(f, labels[::-1].copy())  # same size, same dtype and shape
    with pytest.raises(FingerprintError) as e:
        _open(folder, cfg)
    _one_line(e, m.labels_file)


def test_a_reordered_labels_file_is_refused_even_by_a_manifest_without_checksums(built):
    folder, cfg, m, _ = built
    _strip_checksums(folder)
    labels = np.load(folder / m.labels_file)
    with open(folder / m.labels_file, "wb") as f:
        np.save(f, labels[::-1].copy())
    with pytest.raises(FingerprintError, match="labels are not sorted") as e:
        _open(folder, cfg)
    _one_line(e, m.labels_file)


def test_a_garbled_index_file_is_refused(built):
    folder, cfg, m, _ = built
    _garble_same_size(folder / m.index_file, 8)
    with pytest.raises(FingerprintError) as e:
        _open(folder, cfg)
    _one_line(e, m.index_file)


def test_editing_the_manifest_dim_is_refused(built):
    folder, cfg, m, x = built
    data = json.loads((folder / "manifest.json").read_text())
    data["dim"] = 16
    (folder / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(FingerprintError, match=r"float32 \(200, 32\), the manifest manifest.json says float32 \(200, 16\)") as e:
        _open(folder, cfg)
    _one_line(e, m.vectors_file)


@pytest.mark.parametrize("damage", ["truncate", "not-json", "wrong-type", "empty"])
def test_a_corrupt_or_truncated_manifest_gives_one_line_naming_the_file_and_ragcost_index(built, damage):
    folder, cfg, _, _ = built
    path = folder / "manifest.json"
    text = path.read_text()
    path.write_text({"truncate": text[: len(text) // 2], "not-json": "\x00\x01garbage",
                     "wrong-type": text.replace('"dim": 32', '"dim": "thirty-two"'), "empty": ""}[damage])
    with pytest.raises(FingerprintError, match=r"manifest.json: the index manifest is damaged") as e:
        _open(folder, cfg)
    _one_line(e)
    assert read_manifest(folder) is None  # so `ragcost index` rebuilds it instead of failing the same way


@pytest.mark.parametrize("field", ["index_file", "vectors_file", "labels_file"])
def test_a_manifest_pointing_outside_the_index_folder_is_refused(built, field, tmp_path_factory):
    folder, cfg, m, _ = built
    outside = tmp_path_factory.mktemp("elsewhere")
    name = getattr(m, field)
    (outside / name).write_bytes((folder / name).read_bytes())
    data = json.loads((folder / "manifest.json").read_text())
    data[field] = f"../{outside.name}/{name}"
    (folder / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(FingerprintError, match="is not a file inside the index folder") as e:
        _open(folder, cfg)
    _one_line(e)


def test_a_link_leaving_the_index_folder_is_refused(built, tmp_path_factory):
    folder, cfg, m, _ = built
    outside = tmp_path_factory.mktemp("elsewhere") / m.vectors_file
    os.replace(folder / m.vectors_file, outside)
    os.symlink(outside, folder / m.vectors_file)
    with pytest.raises(FingerprintError, match="is not a file inside the index folder"):
        _open(folder, cfg)


def test_index_dir_cleanup_keeps_the_users_own_hidden_tmp_files(built):
    folder, cfg, _, x = built
    mine = [".notes.tmp", ".backup.json.tmp", "index-notes.txt", "labels.npy"]
    for name in mine:
        (folder / name).write_text("the user's own")
    orphan = folder / "vectors-0123456789abcdef.npy"  # a crashed build's file: ours to sweep
    orphan.write_bytes(b"x")
    labels = np.arange(200, dtype=np.int64)
    write_artifact(folder, build_index(cfg, x, labels), labels, x, FP, 0.1)
    assert all((folder / name).read_text() == "the user's own" for name in mine)
    assert not orphan.exists()


def _strip_checksums(folder):
    data = json.loads((folder / "manifest.json").read_text())
    data.pop("files"), data.pop("format")
    (folder / "manifest.json").write_text(json.dumps(data))


def test_a_manifest_from_before_checksums_opens_silently_with_shape_checks(built):
    folder, cfg, m, x = built
    _strip_checksums(folder)
    loaded = _open(folder, cfg)
    assert loaded.manifest.format == 1 and loaded.index.search(x[:1], 1)[1][0, 0] == 0
    with pytest.raises(FingerprintError, match="written before ragcost recorded checksums.*delete it and run"):
        verify_artifact(folder, deep=True, rebuild_hint=HINT)


def test_a_warm_open_does_not_hash_the_files_again(built, monkeypatch):
    folder, cfg, m, _ = built
    calls = []
    real = verify_mod.checksum
    monkeypatch.setattr(verify_mod, "checksum", lambda p: calls.append(p.name) or real(p))
    _open(folder, cfg)
    assert calls == []  # write_artifact recorded what it wrote as verified
    (folder / ".ragcost-verified.json").unlink()
    _open(folder, cfg)
    assert sorted(calls) == sorted(m.file_names())  # first open after the record is lost: hashed once
    calls.clear()
    _open(folder, cfg)
    assert calls == []


def test_deep_verification_hashes_even_files_whose_size_and_mtime_were_kept(built):
    folder, cfg, m, _ = built
    path = folder / m.vectors_file
    st = path.stat()
    _garble_same_size(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # garbled in place with its timestamp restored
    _open(folder, cfg)  # the warm path trusts (size, mtime): the price of not hashing per start
    with pytest.raises(FingerprintError, match="checksum differs") as e:
        verify_artifact(folder, deep=True, rebuild_hint=HINT)
    _one_line(e, m.vectors_file)


def test_a_damaged_artifact_reads_as_none_so_ragcost_index_rebuilds_it(built):
    folder, cfg, m, _ = built
    assert read_manifest(folder) == m
    _garble_same_size(folder / m.vectors_file)
    assert read_manifest(folder) is None


def test_a_garbled_vectors_file_fails_the_query_and_ragcost_index_is_the_fix(tmp_path, capsys):
    from tests.cli.conftest import run_cli, write_corpus, write_pipeline

    write_corpus(tmp_path / "kb.jsonl")
    kb = write_pipeline(tmp_path, index={"backend": "faiss", "kind": "flat"})
    assert run_cli(capsys, "index", kb)[0] == 0
    m = json.loads((tmp_path / "index" / "manifest.json").read_text())
    _garble_same_size(tmp_path / "index" / m["vectors_file"])
    code, _, err = run_cli(capsys, "query", kb, "refund")
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and m["vectors_file"] in lines[0] and f"ragcost index {kb}" in lines[0]
    code, out, err = run_cli(capsys, "index", kb)
    assert code == 0, err
    code, out, err = run_cli(capsys, "query", kb, "how do I get my money back?")
    assert code == 0 and "Refund policy" in out, err
