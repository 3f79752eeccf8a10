"""The one storage formula on real artifacts and real stores: every byte once, in RAM or on disk."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.config.index import IndexConfig
from ragcost.cost.storage import LABEL_BYTES, folder_bytes, holds_float32, storage_bytes, table_bytes
from ragcost.index.artifact import build_index, write_artifact
from ragcost.records import SourceDocument
from ragcost.store import ChunkRecord, DocumentRecord, content_hash, open_store
from ragcost.config.fields import parse_fields

N, DIM = 400, 32
FP = {"model": "test", "dim": DIM}


@pytest.fixture(autouse=True)
def _one_faiss_thread():
    """OpenMP spin-waits badly on a busy shared machine; a tiny index gains nothing from threads."""
    from ragcost.evaluate.isolation import one_thread

    with one_thread():
        yield


def artifact(tmp_path, backend: str, kind: str, **build):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = np.arange(N, dtype=np.int64)
    cfg = IndexConfig(backend=backend, kind=kind, build=build)
    m = write_artifact(tmp_path, build_index(cfg, x, labels), labels, x, FP, 0.1)
    return m, (tmp_path / m.index_file).stat().st_size


class TestWhatTheIndexHolds:
    def test_hnswlib_holds_its_float32_vectors_so_the_copy_adds_no_ram(self, tmp_path):
        m, index_file = artifact(tmp_path, "hnswlib", "hnsw", M=8, ef_construction=40)
        assert index_file >= N * DIM * 4  # the vectors are in the index file: counting the copy too was double
        assert holds_float32(m.backend, m.kind, m.precision)
        ram, disk = storage_bytes(m.index_bytes, m.vector_count, m.dim, m.file_bytes, holds_vectors=True)
        assert ram == m.index_bytes
        on_disk = sum((tmp_path / f).stat().st_size for f in m.file_names())  # index + vectors + labels, measured here
        assert disk == m.file_bytes == on_disk

    def test_faiss_ivf_pq_keeps_codes_so_the_exact_copy_is_counted(self, tmp_path):
        m, index_file = artifact(tmp_path, "faiss", "ivf_pq", nlist=4, m=8, nbits=4)
        assert index_file < N * DIM * 4  # PQ codes, not the vectors: re-scoring needs the float32 copy
        assert not holds_float32(m.backend, m.kind, m.precision)
        ram, disk = storage_bytes(m.index_bytes, m.vector_count, m.dim, m.file_bytes, holds_vectors=False)
        assert ram == m.index_bytes + N * DIM * 4
        assert disk == sum((tmp_path / f).stat().st_size for f in m.file_names())

    def test_faiss_flat_float32_holds_its_vectors(self, tmp_path):
        m, index_file = artifact(tmp_path, "faiss", "flat")
        assert index_file >= N * DIM * 4 and holds_float32(m.backend, m.kind, m.precision)

    @pytest.mark.parametrize("backend,kind,precision", [
        ("faiss", "flat", "int8"), ("faiss", "hnsw", "float16"), ("faiss", "flat", "binary"),
        ("faiss", "ivf_pq", "float32"), ("some-plugin", "flat", "float32")])
    def test_compressed_or_unknown_indexes_do_not_hold_them(self, backend, kind, precision):
        assert not holds_float32(backend, kind, precision)

    def test_without_files_disk_is_what_a_build_writes(self):
        ram, disk = storage_bytes(1000, 10, 4, None, holds_vectors=True, bm25_bytes=300, store_bytes=5000)
        assert ram == 1000 + 300
        assert disk == 1000 + 10 * 4 * 4 + 10 * LABEL_BYTES + 300 + 5000


def write_docs(store, n: int, prefix: str = "d") -> None:
    rng = np.random.default_rng(n)
    recs = []
    for i in range(n):
        doc = SourceDocument(id=f"{prefix}{i}", text=f"document {i} " * 20, title=f"T{i}", metadata={"tenant": "a"})
        chunks = [ChunkRecord(f"chunk {i}.{j} " * 10, j, j + 1, 10, rng.standard_normal(8).astype(np.float32)) for j in range(3)]
        recs.append(DocumentRecord(doc, content_hash(doc), chunks))
    store.write(recs)


class TestTheStoresBytes:
    def test_the_pipelines_tables_are_measured_and_grow_with_them(self, any_store_url):
        fields = parse_fields({"tenant": "str"})
        store = open_store(any_store_url, "kb_bytes", fields)
        other = open_store(any_store_url, "other_kb", fields)
        try:
            names = [t.name for t in store.tables.md.sorted_tables]
            write_docs(store, 50)
            write_docs(other, 500, "o")
            small = table_bytes(store.engine, names)
            assert small > 0
            write_docs(store, 2000, "e")
            big = table_bytes(store.engine, names)
            assert big > small
            both = table_bytes(store.engine, names + [t.name for t in other.tables.md.sorted_tables])
            assert both > big  # the other collection in the same database is not ours
            if store.engine.url.get_backend_name() == "postgresql":
                import sqlalchemy as sa

                with store.engine.connect() as conn:  # independently: the server's own size of each table
                    want = sum(conn.execute(sa.text(f"SELECT pg_total_relation_size('{n}')")).scalar() for n in names)
                assert big == want
        finally:
            store.close()
            other.close()

    def test_an_empty_list_of_tables_is_zero_bytes(self, tmp_path):
        import sqlalchemy as sa

        assert table_bytes(sa.create_engine(f"duckdb:///{tmp_path}/x.duckdb"), []) == 0

    def test_folder_bytes_sums_the_files(self, tmp_path):
        (tmp_path / "a").write_bytes(b"x" * 10)
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "b").write_bytes(b"y" * 5)
        assert folder_bytes(tmp_path) == 15 and folder_bytes(tmp_path / "missing") == 0


class TestThePipelineCountsEveryPart:
    def test_index_store_and_no_copy_for_hnswlib(self, kb_pipeline):
        m = kb_pipeline.artifact().manifest
        store = kb_pipeline.store()
        tables = table_bytes(store.engine, [t.name for t in store.tables.md.sorted_tables])
        assert tables > 0 and m.backend == "hnswlib"
        assert kb_pipeline.storage_bytes() == (m.index_bytes, m.file_bytes + tables)
