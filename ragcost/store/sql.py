"""The SQLAlchemy document store: DuckDB files by default, PostgreSQL through the same code.

Labels are assigned by the store (no autoincrement: duckdb-engine handles sequences badly), from
a high-water mark kept in the meta table, so a deleted chunk's label is never handed out again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np
import sqlalchemy as sa

from ragcost.config.fields import FieldType, OutOfRange
from ragcost.errors import StoreError
from ragcost.records import SourceDocument
from ragcost.store.base import DocumentRecord, store_registry
from ragcost.store.ddl import ddl_lock
from ragcost.store.filters import VALUE_COLUMN, compile_filter, parse_filter
from ragcost.store.sql_errors import database_error, translated
from ragcost.urls import shown_url
from ragcost.store.sql_schema import Tables, migrate

BATCH = 2000  # rows per IN (...) lookup: keeps well under PostgreSQL's bind-parameter limit


@store_registry.register("duckdb")
@store_registry.register("postgresql")
class SQLStore:
    """One collection of documents/chunks/vectors in one SQL database."""

    def __init__(self, url: str, collection: str, fields: dict[str, FieldType]) -> None:
        self.url, self.collection, self.fields = url, collection, dict(fields)
        self.engine: Optional[sa.Engine] = None
        self.tables = Tables(collection, self.fields)
        t = self.tables
        self.documents, self.chunks_t, self.values, self.meta = t.documents, t.chunks, t.values, t.meta
        self._where = f"store {shown_url(url)} collection {collection!r}"

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self, read_only: bool = False) -> "SQLStore":
        """Connect, create missing tables, and add newly declared metadata columns.

        ``read_only``: connect only (DuckDB in its read-only mode), for a caller that reads
        (``ragcost validate``); nothing is created or migrated.
        """
        if self.engine is not None:
            return self
        try:
            url = sa.engine.make_url(self.url)
        except sa.exc.ArgumentError:
            raise StoreError(f"store URL {shown_url(self.url)!r} is not a SQLAlchemy URL; example: duckdb:///.ragcost/kb.duckdb") from None
        made: Optional[Path] = None  # the DuckDB file this open creates: removed again if the open fails
        if url.get_backend_name() == "duckdb" and url.database and url.database != ":memory:" and not read_only:
            Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            made = None if Path(url.database).expanduser().exists() else Path(url.database).expanduser()
        try:
            if read_only:
                from ragcost.store.readonly import read_only_engine

                self.engine = read_only_engine(self.url)
                return self
            self.engine = sa.create_engine(url)
            with self.engine.begin() as conn:
                ddl_lock(conn, f"store:{self.collection}")  # replicas (and --workers) opening one PostgreSQL store at once
                self.tables.md.create_all(conn)
                migrate(conn, self.tables, self.fields, self._where)
        except StoreError:
            self._abandon(made)
            raise
        except ImportError as e:
            self._abandon(made)
            raise StoreError(f"store {shown_url(self.url)} needs a driver that is not installed ({e.name}); "
                             "pip install 'ragcost[postgres]' for PostgreSQL") from e
        except sa.exc.SQLAlchemyError as e:
            self._abandon(made)
            raise database_error(e, self.url, "opening it") from e
        return self

    def _abandon(self, made: Optional[Path]) -> None:
        """Close after a failed open; a DuckDB file this open created (a full disk) goes too, with its WAL."""
        self.close()
        for p in ([made, made.with_name(made.name + ".wal")] if made is not None else []):
            try:
                p.unlink()
            except OSError:
                pass

    def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None

    def __enter__(self) -> "SQLStore":
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def _e(self) -> sa.Engine:
        if self.engine is None:
            raise StoreError(f"store {shown_url(self.url)} is not open; call open() or use it as a context manager")
        return self.engine

    def _read(self, sql: Any, doing: str) -> list:
        with translated(self.url, doing), self._e.connect() as conn:
            return conn.execute(sql).all()

    # -- meta --------------------------------------------------------------------------------

    def get_meta(self, key: str) -> Optional[str]:
        with translated(self.url, "reading meta"), self._e.connect() as conn:
            return self.tables.get_meta(conn, key)

    def set_meta(self, key: str, value: str) -> None:
        with translated(self.url, "writing meta"), self._e.begin() as conn:
            self.tables.set_meta(conn, key, value)

    # -- writing -----------------------------------------------------------------------------

    def doc_hashes(self) -> dict[str, str]:
        """Every stored document id and its content hash."""
        return dict(self._read(sa.select(self.documents.c.id, self.documents.c.content_hash), "reading document hashes"))

    def write(self, docs: list[DocumentRecord]) -> None:
        """Replace these documents (row, chunks, list values) in one transaction: all or nothing."""
        if not docs:
            return
        docs = list({d.doc.id: d for d in docs}.values())  # a repeated id in one batch: the last one wins
        rows = [self._doc_row(d) for d in docs]
        values = [v for d in docs for v in self._value_rows(d.doc)]
        chunk_rows, dim = _chunk_rows(docs)
        with translated(self.url, f"writing {len(docs)} documents"), self._e.begin() as conn:
            if dim is not None:
                self._check_dim(conn, dim)
            self._replace(conn, rows, values)
            if chunk_rows:
                self._insert_chunks(conn, chunk_rows)

    def _check_dim(self, conn: sa.Connection, dim: int) -> None:
        stored = self.tables.get_meta(conn, "dim")
        if stored is not None and int(stored) != dim and _count(conn, self.chunks_t):
            raise StoreError(f"vectors have {dim} dims but {self._where} holds {stored}-dim vectors; "
                             "re-index into a new collection or delete the old documents first")
        if stored is None or int(stored) != dim:
            self.tables.set_meta(conn, "dim", str(dim))

    def _replace(self, conn: sa.Connection, rows: list[dict], values: list[dict]) -> None:
        existing: set[str] = set()
        for part in _batches([r["id"] for r in rows]):
            conn.execute(sa.delete(self.chunks_t).where(self.chunks_t.c.doc_id.in_(part)))
            conn.execute(sa.delete(self.values).where(self.values.c.doc_id.in_(part)))
            existing.update(conn.execute(sa.select(self.documents.c.id).where(self.documents.c.id.in_(part))).scalars())
        # UPDATE existing rows rather than delete+insert: DuckDB rejects re-inserting a key
        # deleted in the same transaction
        upd = [{**{k: v for k, v in r.items() if k != "id"}, "b_id": r["id"]} for r in rows if r["id"] in existing]
        if upd:
            conn.execute(sa.update(self.documents).where(self.documents.c.id == sa.bindparam("b_id")), upd)
        new = [r for r in rows if r["id"] not in existing]
        if new:
            conn.execute(sa.insert(self.documents), new)
        if values:
            conn.execute(sa.insert(self.values), values)

    def _insert_chunks(self, conn: sa.Connection, chunk_rows: list[dict]) -> None:
        top = conn.execute(sa.select(sa.func.max(self.chunks_t.c.label))).scalar()
        # a high-water mark, so labels of deleted chunks are never handed out again
        mark = self.tables.get_meta(conn, "next_label")
        first = max(-1 if top is None else int(top), int(mark or 0) - 1) + 1
        for i, r in enumerate(chunk_rows):
            r["label"] = first + i
        conn.execute(sa.insert(self.chunks_t), chunk_rows)
        self.tables.set_meta(conn, "next_label", str(first + len(chunk_rows)))

    def _doc_row(self, d: DocumentRecord) -> dict:
        row = dict(id=d.doc.id, title=d.doc.title or "", text=d.doc.text, content_hash=d.content_hash)
        for f in self.fields.values():
            if not f.is_list:
                row[f.name] = _checked(f, d.doc)
        return row

    def _value_rows(self, doc: SourceDocument) -> list[dict]:
        out = []
        for f in self.fields.values():
            if f.is_list:
                col = VALUE_COLUMN[f.base]
                for pos, v in enumerate(_checked(f, doc) or []):
                    out.append({"doc_id": doc.id, "field": f.name, "pos": pos,
                                "v_str": None, "v_int": None, "v_float": None, "v_bool": None, col: v})
        return out

    def delete(self, doc_ids: Iterable[str]) -> int:
        """Remove documents with their chunks and values; returns how many documents were removed."""
        ids, n = list(doc_ids), 0
        with translated(self.url, f"deleting {len(ids)} documents"), self._e.begin() as conn:
            for part in _batches(ids):
                conn.execute(sa.delete(self.chunks_t).where(self.chunks_t.c.doc_id.in_(part)))
                conn.execute(sa.delete(self.values).where(self.values.c.doc_id.in_(part)))
                n += conn.execute(sa.delete(self.documents).where(self.documents.c.id.in_(part))).rowcount
        return n

    # -- reading -----------------------------------------------------------------------------

    def revision(self) -> str:
        """The corpus revision: sha256 over the sorted (document id, content hash) pairs."""
        h = hashlib.sha256()
        for doc_id, ch in sorted(self.doc_hashes().items()):
            h.update(f"{doc_id}\x00{ch}\n".encode("utf-8"))
        return h.hexdigest()

    def count_documents(self) -> int:
        return int(self._read(sa.select(sa.func.count()).select_from(self.documents), "counting documents")[0][0])

    def count_chunks(self) -> int:
        return int(self._read(sa.select(sa.func.count()).select_from(self.chunks_t), "counting chunks")[0][0])

    def vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """All chunk labels (int64, ascending) and their vectors as one (n, d) float32 array."""
        c = self.chunks_t.c
        rows = self._read(sa.select(c.label, c.vector).order_by(c.label), "reading vectors")
        if not rows:
            return np.empty(0, np.int64), np.empty((0, int(self.get_meta("dim") or 0)), np.float32)
        labels = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        flat = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype=np.float32)
        return labels, flat.reshape(len(rows), -1).copy()

    def vectors_for(self, labels: Iterable[int]) -> dict[int, np.ndarray]:
        """Full-dimension float32 vectors of these chunk labels (unknown labels are absent)."""
        c = self.chunks_t.c
        out: dict[int, np.ndarray] = {}
        for part in _batches(_labels(labels)):
            for label, blob in self._read(sa.select(c.label, c.vector).where(c.label.in_(part)), "reading vectors"):
                out[int(label)] = np.frombuffer(bytes(blob), dtype=np.float32)
        return out

    def chunk_column(self, name: str) -> tuple[np.ndarray, list]:
        """All chunk labels (ascending) and one column of theirs: ``text``, ``doc_id``, ``chunk_no``, ..."""
        c = self.chunks_t.c
        if name not in c or name == "vector":
            raise StoreError(f"chunk_column: no column {name!r}; use one of {', '.join(k for k in c.keys() if k != 'vector')}")
        rows = self._read(sa.select(c.label, c[name]).order_by(c.label), f"reading chunk {name}")
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)), [r[1] for r in rows]

    def chunks(self, labels: Iterable[int]) -> list[dict]:
        """Chunks with their document's title and metadata (missing fields and empty lists omitted), in ``labels`` order; unknown labels dropped."""
        want = _labels(labels)
        c, d = self.chunks_t.c, self.documents.c
        scalar = [f.name for f in self.fields.values() if not f.is_list]
        found: dict[int, dict] = {}
        with translated(self.url, "reading chunks"), self._e.connect() as conn:
            for part in _batches(want):
                q = (sa.select(c.label, c.doc_id, c.chunk_no, c.text, c.start, c.end, c.n_tokens, d.title,
                               *(d[n] for n in scalar))
                     .select_from(self.chunks_t.join(self.documents, c.doc_id == d.id)).where(c.label.in_(part)))
                for r in conn.execute(q).mappings():
                    meta = {n: r[n] for n in scalar if r[n] is not None}
                    found[int(r["label"])] = dict(label=int(r["label"]), doc_id=r["doc_id"], chunk_no=r["chunk_no"],
                                                  title=r["title"], text=r["text"], start=r["start"], end=r["end"],
                                                  n_tokens=r["n_tokens"], metadata=meta)
            lists = self._lists(conn, {x["doc_id"] for x in found.values()})
        for x in found.values():
            x["metadata"].update(lists.get(x["doc_id"], {}))
        return [found[x] for x in want if x in found]

    def _lists(self, conn: sa.Connection, doc_ids: set[str]) -> dict[str, dict[str, list]]:
        out: dict[str, dict[str, list]] = {}
        v = self.values.c
        list_fields = {f.name: VALUE_COLUMN[f.base] for f in self.fields.values() if f.is_list}
        if not list_fields:
            return out
        for part in _batches(sorted(doc_ids)):
            q = sa.select(self.values).where(v.doc_id.in_(part), v.field.in_(list(list_fields))).order_by(v.doc_id, v.field, v.pos)
            for r in conn.execute(q).mappings():
                out.setdefault(r["doc_id"], {}).setdefault(r["field"], []).append(r[list_fields[r["field"]]])
        return out

    def _filtered(self, expr: Any) -> sa.ColumnElement:
        return compile_filter(parse_filter(expr), self.fields, self.documents, self.values)

    def matching_labels(self, expr: Any) -> np.ndarray:
        """Sorted int64 labels of the chunks whose document matches the filter."""
        c = self.chunks_t.c
        q = (sa.select(c.label).select_from(self.chunks_t.join(self.documents, c.doc_id == self.documents.c.id))
             .where(self._filtered(expr)).order_by(c.label))
        return np.array([r[0] for r in self._read(q, "running a metadata filter")], dtype=np.int64)

    def count_matching(self, expr: Any) -> int:
        """How many chunks (vectors) the filter selects (not in the protocol: ``len(matching_labels)``)."""
        c = self.chunks_t.c
        q = (sa.select(sa.func.count()).select_from(self.chunks_t.join(self.documents, c.doc_id == self.documents.c.id))
             .where(self._filtered(expr)))
        return int(self._read(q, "counting a metadata filter")[0][0])


def _checked(f: FieldType, doc: SourceDocument) -> Any:
    try:
        return f.check(doc.metadata.get(f.name))
    except ValueError as e:
        fix = "" if isinstance(e, OutOfRange) else "; fix the source value"
        raise StoreError(f"document {doc.id!r} ({doc.origin or 'no origin'}): {e}{fix}") from None


def _chunk_rows(docs: list[DocumentRecord]) -> tuple[list[dict], Optional[int]]:
    """Chunk rows of these documents (labels not yet set) and their common vector dimension."""
    rows, dim = [], None
    for d in docs:
        for no, c in enumerate(d.chunks):
            v = np.ascontiguousarray(c.vector, dtype=np.float32).ravel()
            if dim is not None and v.size != dim:
                raise StoreError(f"document {d.doc.id!r} chunk {no}: vector has {v.size} dims, others {dim}; embed with one model")
            dim = v.size
            rows.append(dict(doc_id=d.doc.id, chunk_no=no, text=c.text, start=int(c.start), end=int(c.end),
                             n_tokens=int(c.n_tokens), vector=v.tobytes()))
    return rows, dim


def _labels(labels: Iterable[int]) -> list[int]:
    """Labels as ints; one outside int64 cannot be stored, so it is simply absent."""
    return [x for x in (int(y) for y in labels) if -(2**63) <= x < 2**63]


def _count(conn: sa.Connection, table: sa.Table) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar())


def _batches(items: list, n: int = BATCH) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]
