"""The one storage formula: the bytes a pipeline keeps in RAM and on disk, as query, eval and plan charge them.

What counts where:

- **RAM** (what the serving process keeps resident): the index (``index_bytes``, the backend's
  own accounting); the float32 exact-scan copy (the artifact's ``vectors-*.npy``, memory-mapped,
  read by filtered exact scans and re-scoring) -- *only when the index does not itself hold every
  vector at float32* (hnswlib; faiss flat / hnsw / ivf_flat at precision float32), so a vector is
  never charged twice -- and, in a process that loaded it, only as far as it is resident (a mapped
  file costs disk until it is read: an IVF-PQ index with 76.8 MB of copy held 3 MB at load and
  67.6 MB after re-scoring read it; charging all of it was 26.6x what was resident); the BM25 index when a hybrid stage exists (bm25s loads it whole: its
  folder's bytes).
- **Disk** (every file kept): the artifact's measured files (index, vectors, labels; without
  files -- an eval candidate, a plan -- what a build would write: index + float32 vectors +
  int64 labels); the BM25 folder; the store's bytes for the pipeline's own tables (documents,
  chunks with their texts and vectors, metadata). The store counts on disk only: the database
  serves from its files through its own cache.

``plan`` calls :func:`storage_bytes` with its estimated index bytes and :func:`holds_float32`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

LABEL_BYTES = 8  # int64 chunk labels, saved beside the index
EXACT_COPY_BYTES = 4  # float32 per dimension: the exact-scan copy kept beside the index


def holds_float32(backend: str, kind: str, precision: str) -> bool:
    """Whether the index itself stores every vector at float32 (then the exact-scan copy adds no RAM).

    What the backend declares for the kind (``KindSpec.holds_float32``): hnswlib keeps the float32
    vectors in its graph's level 0; faiss ``Flat`` storage (kinds flat, hnsw, ivf_flat at precision
    float32) keeps them as its codes. PQ, scalar-quantised and binary indexes do not, and an unknown
    backend or kind is assumed not to (the copy is counted).
    """
    from ragcost.index.check import holds_float32 as declared

    return declared(backend, kind, precision)


def exact_copy_bytes(vector_count: int, dim: int) -> int:
    return int(vector_count) * int(dim) * EXACT_COPY_BYTES


def storage_bytes(index_bytes: int, vector_count: int, dim: int, file_bytes: Optional[int] = None, *,
                  holds_vectors: bool = False, bm25_bytes: int = 0, store_bytes: int = 0,
                  copy_resident: Optional[int] = None) -> tuple[int, int]:
    """(RAM, disk) bytes by the rules in the module docstring.

    ``holds_vectors``: :func:`holds_float32` of the index; ``file_bytes``: what the artifact measured
    on disk (None: no files yet); ``bm25_bytes``: the BM25 folder; ``store_bytes``: the pipeline's tables;
    ``copy_resident``: of the memory-mapped exact-scan copy, the bytes the kernel holds in this process's RAM
    now (:func:`mapped_resident_bytes`); None (not loaded: an eval candidate, a plan) charges all of it.
    """
    copy = exact_copy_bytes(vector_count, dim)
    in_ram = copy if copy_resident is None else min(int(copy_resident), copy)
    ram = int(index_bytes) + (0 if holds_vectors else in_ram) + int(bm25_bytes)
    files = int(file_bytes) if file_bytes is not None else int(index_bytes) + copy + int(vector_count) * LABEL_BYTES
    return ram, files + int(bm25_bytes) + int(store_bytes)


def mapped_resident_bytes(path: Path | str) -> Optional[int]:
    """The bytes of ``path`` this process has memory-mapped that are resident now (the ``Rss`` of its mappings in
    ``/proc/self/smaps``): a mapped file is on disk until read, and in RAM only as far as it was read. 0 when it is
    not mapped; None where ``/proc`` cannot say (not Linux)."""
    target = str(Path(path).resolve())
    total, inside = 0, False
    try:
        with open("/proc/self/smaps", "rb") as f:
            for raw in f:
                line = raw.decode("utf-8", "replace")
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):  # a mapping's header: "start-end perms offset dev inode path"
                    parts = line.split(None, 5)
                    inside = len(parts) == 6 and parts[5].rstrip("\n") == target
                elif inside and head == "Rss:":
                    total += int(line.split()[1]) * 1024
    except OSError:
        return None
    return total


def folder_bytes(path: Path | str) -> int:
    """Bytes of the regular files under ``path`` (0 when it does not exist)."""
    root = Path(path)
    if not root.is_dir():
        return 0
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def table_bytes(engine, tables: Iterable[str]) -> int:
    """The store's bytes for ``tables`` (a pipeline's ``rc_<name>_*`` tables) through SQLAlchemy.

    PostgreSQL: ``pg_total_relation_size`` (heap, indexes, TOAST) of each table in the current
    schema. DuckDB: after a CHECKPOINT, the file's storage blocks that hold these tables x the block
    size (other collections, the ledger and free blocks in the same file are not the pipeline's).
    """
    import sqlalchemy as sa

    names = sorted(set(tables))
    if not names:
        return 0
    backend = engine.url.get_backend_name()
    with engine.connect() as conn:
        if backend == "postgresql":
            q = sa.text("SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname IN :names"
                        ).bindparams(sa.bindparam("names", expanding=True))
            return int(conn.execute(q, {"names": names}).scalar())
        if backend == "duckdb":
            return _duckdb_share(conn, engine.url.database, names)
    return 0


def _duckdb_share(conn, database: Optional[str], names: list[str]) -> int:
    import sqlalchemy as sa

    if not database or database == ":memory:":
        return 0
    try:  # rows still in the WAL have no blocks yet: write them to the file first (what closing would do)
        conn.exec_driver_sql("CHECKPOINT")
        conn.commit()
    except sa.exc.DBAPIError:  # another transaction is open: measure what is checkpointed
        conn.rollback()
    block = int(conn.execute(sa.text("SELECT block_size FROM pragma_database_size() WHERE database_name = current_database()")).scalar())
    have = {r[0] for r in conn.execute(sa.text("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"))}
    mine: set[int] = set()
    for t in names:
        if t in have:
            lit = t.replace("'", "''")  # a table name from our own schema, quoted as a literal
            mine.update(r[0] for r in conn.execute(sa.text(f"SELECT DISTINCT block_id FROM pragma_storage_info('{lit}') "
                                                          "WHERE persistent AND block_id >= 0")))
    size = Path(database).expanduser().stat().st_size
    return min(len(mine) * block, size)
