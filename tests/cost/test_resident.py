"""A memory-mapped exact-scan copy is RAM only as far as it is resident: measured against the process's own RSS."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.cost.storage import mapped_resident_bytes, storage_bytes


def _rss() -> int:
    """The process's file-backed resident bytes (the kernel's ``RssFile``): what mapped files hold in RAM. The
    anonymous part (a gathered numpy array) is left out: whether malloc gives a freed 61 MB buffer back to the
    kernel at once depends on what ran in the process before (a fresh clone's worker once kept it: +138.6 MB)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssFile")


@pytest.fixture
def copy_file(tmp_path):
    # an IVF-PQ index's float32 copy: 50,000 x 384 = 76.8 MB, as in the audit
    path = tmp_path / "vectors-0.npy"
    np.save(path, np.random.default_rng(0).standard_normal((50_000, 384), dtype=np.float32))
    return path


def test_the_charge_follows_what_is_resident_after_load_and_after_a_rescoring_read(copy_file):
    import os

    # the file's pages may sit in the page cache from the write; drop them so a read is what makes them resident
    fd = os.open(copy_file, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    copy = 50_000 * 384 * 4
    base = _rss()
    vectors = np.load(copy_file, mmap_mode="r")
    loaded = mapped_resident_bytes(copy_file)
    ram_loaded, _ = storage_bytes(3_000_000, 50_000, 384, holds_vectors=False, copy_resident=loaded)
    grew_at_load = _rss() - base
    assert loaded <= 0.1 * copy  # mapped, not read: not RAM
    assert abs(loaded - grew_at_load) <= 0.10 * copy
    rows = np.random.default_rng(1).choice(50_000, 40_000, replace=False)
    float(np.asarray(vectors[np.sort(rows)]).sum())  # a rescoring pass reads 80% of the rows
    read = mapped_resident_bytes(copy_file)
    grew = _rss() - base
    print(f"copy {copy / 1e6:.1f} MB: resident at load {loaded / 1e6:.2f} MB (RSS +{grew_at_load / 1e6:.2f}), after the "
          f"read {read / 1e6:.1f} MB (RSS +{grew / 1e6:.1f})")
    assert read >= 0.7 * copy
    # the process's file-backed RSS grew by the mapped pages read, as smaps says of the one file
    assert read == pytest.approx(grew, rel=0.10)
    ram_read, _ = storage_bytes(3_000_000, 50_000, 384, holds_vectors=False, copy_resident=read)
    assert ram_loaded < 0.2 * ram_read  # charged all of it, the loaded index was 26.6x its resident RAM


def test_a_file_not_mapped_is_zero_and_the_whole_copy_is_charged_where_nothing_was_loaded(copy_file):
    assert mapped_resident_bytes(copy_file) == 0
    ram, _ = storage_bytes(1000, 10, 8, holds_vectors=False)  # a plan or an eval candidate: no process holds it
    assert ram == 1000 + 10 * 8 * 4


def test_a_loaded_pipeline_charges_its_copy_as_resident_now(tmp_path, monkeypatch):
    """The wiring: Pipeline.storage_bytes re-reads the copy's residency (an int8 flat index does not hold float32)."""
    from ragcost.runtime import pipeline as P
    from ragcost.runtime import pipeline_storage
    from ragcost.runtime.indexing import run_index
    from tests.cli.conftest import write_corpus, write_pipeline

    monkeypatch.setattr(pipeline_storage, "RESIDENT_EVERY_S", 0.0)
    write_corpus(tmp_path / "kb.jsonl")
    pipe = P.Pipeline.load(write_pipeline(tmp_path, index={"backend": "faiss", "kind": "flat"},
                                          embed={"model": "all-MiniLM-L6-v2", "batch_size": 16, "precision": "int8"}))
    try:
        run_index(pipe)
        art = pipe.artifact()
        m = art.manifest
        path = pipe.config.index_path / m.vectors_file
        ram, _ = pipe.storage_bytes()
        assert ram == m.index_bytes + min(mapped_resident_bytes(path), m.vector_count * m.dim * 4)
        float(np.asarray(art.vectors).sum())  # read the copy: now resident
        ram_after, _ = pipe.storage_bytes()
        assert ram_after == m.index_bytes + m.vector_count * m.dim * 4  # a small file: every page of it
    finally:
        pipe.close()
