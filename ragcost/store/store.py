"""Documents, chunks, vectors and typed metadata over SQLAlchemy Core (a DuckDB file by default).

Only portable Core constructs are used, so a PostgreSQL URL works through the same code.
Labels are assigned by the store (no autoincrement: duckdb-engine handles sequences badly).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import sqlalchemy as sa

from ragcost.config.fields import FieldType
from ragcost.errors import StoreError
from ragcost.records import SourceDocument
from ragcost.store.base import ChunkRecord, DocumentRecord  # noqa: F401  (re-exported while the store moves)
from ragcost.store.filters import VALUE_COLUMN, compile_filter, parse_filter

SQL_TYPES = {"str": sa.Text, "int": sa.BigInteger, "float": sa.Double, "bool": sa.Boolean}
# information_schema data_type names (DuckDB, PostgreSQL) -> ragcost base type
SQL_NAMES = {
    "str": ("varchar", "text", "character varying", "string", "char", "character"),
    "int": ("bigint", "integer", "int", "smallint", "hugeint", "int8", "int4", "int2", "tinyint"),
    "float": ("double", "double precision", "real", "float", "float8", "float4", "numeric", "decimal"),
    "bool": ("boolean", "bool"),
}
_INFO = sa.Table(
    "columns", sa.MetaData(), sa.Column("table_catalog"), sa.Column("table_schema"), sa.Column("table_name"),
    sa.Column("column_name"), sa.Column("data_type"), schema="information_schema",
)
BATCH = 2000  # rows per IN (...) lookup: keeps well under PostgreSQL's bind-parameter limit


def content_hash(doc: SourceDocument) -> str:
    """sha256 of the document's title, text and metadata as canonical JSON."""
    payload = {"title": doc.title, "text": doc.text, "metadata": doc.metadata}
    canon = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def _slug(collection: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", collection.lower()).strip("_")
    if not slug:
        raise StoreError(f"collection name {collection!r} has no letters or digits; use e.g. 'support_kb'")
    return slug


class Store:
    """One collection of documents/chunks/vectors in one SQL database."""

    def __init__(self, url: str, collection: str, fields: dict[str, FieldType]) -> None:
        self.url, self.collection, self.fields = url, collection, dict(fields)
        self.engine: sa.Engine | None = None
        p = f"rc_{_slug(collection)}_"
        md = sa.MetaData()
        scalar = [sa.Column(f.name, SQL_TYPES[f.base]) for f in self.fields.values() if not f.is_list]
        self.documents = sa.Table(
            p + "documents", md,
            sa.Column("id", sa.String, primary_key=True),
            sa.Column("title", sa.Text, nullable=False),
            sa.Column("text", sa.Text, nullable=False),
            sa.Column("content_hash", sa.String, nullable=False),
            *scalar,
        )
        self.chunks_t = sa.Table(
            p + "chunks", md,
            sa.Column("label", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("doc_id", sa.String, nullable=False, index=True),
            sa.Column("chunk_no", sa.Integer, nullable=False),
            sa.Column("text", sa.Text, nullable=False),
            sa.Column("start", sa.Integer, nullable=False),
            sa.Column("end", sa.Integer, nullable=False),
            sa.Column("n_tokens", sa.Integer, nullable=False),
            sa.Column("vector", sa.LargeBinary, nullable=False),
        )
        # list-typed metadata: one row per element, with a typed value column per base type
        self.values = sa.Table(
            p + "values", md,
            sa.Column("doc_id", sa.String, primary_key=True),
            sa.Column("field", sa.String, primary_key=True),
            sa.Column("pos", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("v_str", sa.Text),
            sa.Column("v_int", sa.BigInteger),
            sa.Column("v_float", sa.Double),
            sa.Column("v_bool", sa.Boolean),
        )
        self.meta = sa.Table(
            p + "meta", md,
            sa.Column("key", sa.String, primary_key=True),
            sa.Column("value", sa.Text, nullable=False),
        )
        self._md = md

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> "Store":
        """Connect, create missing tables, and add newly declared metadata columns."""
        if self.engine is not None:
            return self
        try:
            url = sa.engine.make_url(self.url)
        except sa.exc.ArgumentError as e:
            raise StoreError(f"store URL {self.url!r} is not a SQLAlchemy URL ({e}); example: duckdb:///.ragcost/kb.duckdb") from None
        if url.get_backend_name() == "duckdb" and url.database and url.database != ":memory:":
            Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = sa.create_engine(url)
            with self.engine.begin() as conn:
                self._md.create_all(conn)
                self._migrate(conn)
        except StoreError:
            self.close()
            raise
        except (sa.exc.SQLAlchemyError, ImportError) as e:
            self.close()
            raise StoreError(f"cannot open store {self.url!r}: {str(e).splitlines()[0]}") from e
        return self

    def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None

    def __enter__(self) -> "Store":
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _migrate(self, conn: sa.Connection) -> None:
        """Additive only: add columns for new scalar fields; refuse a field whose type changed."""
        old = json.loads(self._get_meta(conn, "fields") or "{}")
        for name, spec in old.items():
            if name in self.fields and self.fields[name].spec != spec:
                self._type_changed(name, spec, self.fields[name].spec)
        existing = self._columns(conn)
        for f in self.fields.values():
            if f.is_list:
                if f.name in existing and f.name not in old:
                    self._type_changed(f.name, existing[f.name], f.spec)
                continue
            if f.name not in existing:
                col = self.documents.c[f.name]
                ddl = sa.schema.CreateColumn(col).compile(dialect=conn.dialect)
                table = conn.dialect.identifier_preparer.format_table(self.documents)
                # identifiers only (field names are validated identifiers); no values reach this DDL
                conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {ddl}"))
            elif existing[f.name] != f.base:
                self._type_changed(f.name, existing[f.name], f.spec)
        merged = {**old, **{n: f.spec for n, f in self.fields.items()}}
        if merged != old:
            self._set_meta(conn, "fields", json.dumps(merged, sort_keys=True))

    def _columns(self, conn: sa.Connection) -> dict[str, str]:
        """Column name -> ragcost base type, from information_schema (duckdb-engine's reflection breaks on SQLAlchemy 2.1)."""
        i = _INFO.c
        q = sa.select(i.column_name, i.data_type).where(
            i.table_name == self.documents.name, i.table_schema == sa.func.current_schema(),
            i.table_catalog == sa.func.current_database())
        return {name: _spec_of(str(t)) for name, t in conn.execute(q).all()}

    def _type_changed(self, name: str, old: str, new: str) -> None:
        raise StoreError(
            f"store {self.url!r} collection {self.collection!r}: metadata field {name!r} is {old} in the store "
            f"but {new} in the pipeline; keep it {old}, rename the field, or re-index into a new collection"
        )

    @property
    def _e(self) -> sa.Engine:
        if self.engine is None:
            raise StoreError(f"store {self.url!r} is not open; call Store.open() or use it as a context manager")
        return self.engine

    # -- meta --------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        with self._e.connect() as conn:
            return self._get_meta(conn, key)

    def set_meta(self, key: str, value: str) -> None:
        with self._e.begin() as conn:
            self._set_meta(conn, key, value)

    def _get_meta(self, conn: sa.Connection, key: str) -> str | None:
        return conn.execute(sa.select(self.meta.c.value).where(self.meta.c.key == key)).scalar_one_or_none()

    def _set_meta(self, conn: sa.Connection, key: str, value: str) -> None:
        # portable upsert: UPDATE, then INSERT if nothing was there
        done = conn.execute(sa.update(self.meta).where(self.meta.c.key == key).values(value=str(value)))
        if not done.rowcount:
            conn.execute(sa.insert(self.meta).values(key=key, value=str(value)))

    # -- writing -----------------------------------------------------------------------------

    def doc_hashes(self) -> dict[str, str]:
        """Every stored document id and its content hash."""
        with self._e.connect() as conn:
            return dict(conn.execute(sa.select(self.documents.c.id, self.documents.c.content_hash)).all())

    def write(self, docs: list[DocumentRecord]) -> None:
        """Replace these documents (row, chunks, list values) in one transaction: all or nothing."""
        if not docs:
            return
        by_id = {d.doc.id: d for d in docs}  # a repeated id in one batch: the last one wins
        docs = list(by_id.values())
        rows, values, chunk_rows = [], [], []
        dim = None
        for d in docs:
            rows.append(self._doc_row(d))
            values.extend(self._value_rows(d.doc))
            for no, c in enumerate(d.chunks):
                v = np.ascontiguousarray(c.vector, dtype=np.float32).ravel()
                if dim is not None and v.size != dim:
                    raise StoreError(f"document {d.doc.id!r} chunk {no}: vector has {v.size} dims, others {dim}; embed with one model")
                dim = v.size
                chunk_rows.append(dict(doc_id=d.doc.id, chunk_no=no, text=c.text, start=int(c.start), end=int(c.end),
                                       n_tokens=int(c.n_tokens), vector=v.tobytes()))
        ids = list(by_id)
        with self._e.begin() as conn:
            if dim is not None:
                stored = self._get_meta(conn, "dim")
                if stored is not None and int(stored) != dim and self._count(conn, self.chunks_t):
                    raise StoreError(f"vectors have {dim} dims but store {self.url!r} holds {stored}-dim vectors; "
                                     "re-index into a new collection or delete the old documents first")
                if stored is None or int(stored) != dim:
                    self._set_meta(conn, "dim", str(dim))
            existing = set()
            for part in _batches(ids):
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
            if chunk_rows:
                top = conn.execute(sa.select(sa.func.max(self.chunks_t.c.label))).scalar()
                # a high-water mark, so labels of deleted chunks are never handed out again
                mark = self._get_meta(conn, "next_label")
                first = max(-1 if top is None else int(top), int(mark or 0) - 1) + 1
                for i, r in enumerate(chunk_rows):
                    r["label"] = first + i
                conn.execute(sa.insert(self.chunks_t), chunk_rows)
                self._set_meta(conn, "next_label", str(first + len(chunk_rows)))

    def _doc_row(self, d: DocumentRecord) -> dict:
        row = dict(id=d.doc.id, title=d.doc.title or "", text=d.doc.text, content_hash=d.content_hash)
        for f in self.fields.values():
            if not f.is_list:
                row[f.name] = self._check(f, d.doc)
        return row

    def _value_rows(self, doc: SourceDocument) -> list[dict]:
        out = []
        for f in self.fields.values():
            if f.is_list:
                col = VALUE_COLUMN[f.base]
                for pos, v in enumerate(self._check(f, doc) or []):
                    out.append({"doc_id": doc.id, "field": f.name, "pos": pos,
                                "v_str": None, "v_int": None, "v_float": None, "v_bool": None, col: v})
        return out

    def _check(self, f: FieldType, doc: SourceDocument) -> Any:
        try:
            return f.check(doc.metadata.get(f.name))
        except ValueError as e:
            raise StoreError(f"document {doc.id!r} ({doc.origin or 'no origin'}): {e}; fix the source value") from None

    def delete(self, doc_ids: Iterable[str]) -> int:
        """Remove documents with their chunks and values; returns how many documents were removed."""
        ids, n = list(doc_ids), 0
        with self._e.begin() as conn:
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
        with self._e.connect() as conn:
            return self._count(conn, self.documents)

    def count_chunks(self) -> int:
        with self._e.connect() as conn:
            return self._count(conn, self.chunks_t)

    @staticmethod
    def _count(conn: sa.Connection, table: sa.Table) -> int:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar())

    def vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """All chunk labels (int64, ascending) and their vectors as one (n, d) float32 array."""
        c = self.chunks_t.c
        with self._e.connect() as conn:
            rows = conn.execute(sa.select(c.label, c.vector).order_by(c.label)).all()
        if not rows:
            return np.empty(0, np.int64), np.empty((0, int(self.get_meta("dim") or 0)), np.float32)
        labels = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        flat = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype=np.float32)
        return labels, flat.reshape(len(rows), -1).copy()

    def vectors_for(self, labels: Iterable[int]) -> dict[int, np.ndarray]:
        """Full-dimension float32 vectors of these chunk labels (unknown labels are absent)."""
        c = self.chunks_t.c
        out: dict[int, np.ndarray] = {}
        with self._e.connect() as conn:
            for part in _batches([int(x) for x in labels]):
                for label, blob in conn.execute(sa.select(c.label, c.vector).where(c.label.in_(part))).all():
                    out[int(label)] = np.frombuffer(bytes(blob), dtype=np.float32)
        return out

    def chunk_column(self, name: str) -> tuple[np.ndarray, list]:
        """All chunk labels (ascending) and one column of theirs: ``text``, ``doc_id``, ``chunk_no``, ..."""
        c = self.chunks_t.c
        if name not in c or name == "vector":
            raise StoreError(f"chunk_column: no column {name!r}; use one of {', '.join(k for k in c.keys() if k != 'vector')}")
        with self._e.connect() as conn:
            rows = conn.execute(sa.select(c.label, c[name]).order_by(c.label)).all()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)), [r[1] for r in rows]

    def chunks(self, labels: Iterable[int]) -> list[dict]:
        """Chunks with their document's title and metadata (missing fields and empty lists omitted), in ``labels`` order; unknown labels dropped."""
        want = [int(x) for x in labels]
        c, d = self.chunks_t.c, self.documents.c
        scalar = [f.name for f in self.fields.values() if not f.is_list]
        found: dict[int, dict] = {}
        with self._e.connect() as conn:
            for part in _batches(want):
                q = (sa.select(c.label, c.doc_id, c.chunk_no, c.text, c.start, c.end, c.n_tokens, d.title,
                               *(d[n] for n in scalar))
                     .select_from(self.chunks_t.join(self.documents, c.doc_id == d.id)).where(c.label.in_(part)))
                for r in conn.execute(q).mappings():
                    meta = {n: r[n] for n in scalar if r[n] is not None}
                    found[int(r["label"])] = dict(label=int(r["label"]), doc_id=r["doc_id"], chunk_no=r["chunk_no"],
                                                  title=r["title"], text=r["text"], start=r["start"], end=r["end"],
                                                  n_tokens=r["n_tokens"], metadata=meta)
            docs = {x["doc_id"] for x in found.values()}
            lists = self._lists(conn, docs)
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

    def _filtered(self, expr: dict | str | None) -> sa.ColumnElement:
        return compile_filter(parse_filter(expr), self.fields, self.documents, self.values)

    def matching_labels(self, expr: dict | str | None) -> np.ndarray:
        """Sorted int64 labels of the chunks whose document matches the filter."""
        c = self.chunks_t.c
        q = (sa.select(c.label).select_from(self.chunks_t.join(self.documents, c.doc_id == self.documents.c.id))
             .where(self._filtered(expr)).order_by(c.label))
        with self._e.connect() as conn:
            return np.array(conn.execute(q).scalars().all(), dtype=np.int64)

    def count_matching(self, expr: dict | str | None) -> int:
        """How many chunks (vectors) the filter selects: the selectivity retrieval decides on."""
        c = self.chunks_t.c
        q = (sa.select(sa.func.count()).select_from(self.chunks_t.join(self.documents, c.doc_id == self.documents.c.id))
             .where(self._filtered(expr)))
        with self._e.connect() as conn:
            return int(conn.execute(q).scalar())


def _spec_of(sql_name: str) -> str:
    """The ragcost base type of an information_schema data_type, or the SQL name itself."""
    base = sql_name.lower().split("(")[0].strip()
    return next((k for k, names in SQL_NAMES.items() if base in names), sql_name)


def _batches(items: list, n: int = BATCH) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]
