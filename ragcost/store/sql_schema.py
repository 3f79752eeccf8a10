"""The SQL store's tables for one collection, and their additive migration.

Only portable SQLAlchemy Core constructs are used, so DuckDB and PostgreSQL share this code.
"""

from __future__ import annotations

import json
import re
from typing import Optional

import sqlalchemy as sa

from ragcost.config.fields import FieldType
from ragcost.errors import StoreError

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


def slug(collection: str) -> str:
    """The table-name prefix of a collection: lower-case letters, digits and underscores."""
    out = re.sub(r"[^a-z0-9]+", "_", collection.lower()).strip("_")
    if not out:
        raise StoreError(f"collection name {collection!r} has no letters or digits; use e.g. 'support_kb'")
    return out


def chunk_table_name(collection: str) -> str:
    """The chunk table of a collection (an index backend living in the same database adds its column there)."""
    return f"rc_{slug(collection)}_chunks"


class Tables:
    """documents (scalar metadata as columns), chunks (label, text, vector), values (list metadata), meta."""

    def __init__(self, collection: str, fields: dict[str, FieldType]) -> None:
        p = f"rc_{slug(collection)}_"
        self.md = md = sa.MetaData()
        scalar = [sa.Column(f.name, SQL_TYPES[f.base]) for f in fields.values() if not f.is_list]
        self.documents = sa.Table(
            p + "documents", md,
            sa.Column("id", sa.String, primary_key=True),
            sa.Column("title", sa.Text, nullable=False),
            sa.Column("text", sa.Text, nullable=False),
            sa.Column("content_hash", sa.String, nullable=False),
            *scalar,
        )
        self.chunks = sa.Table(
            chunk_table_name(collection), md,
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

    def get_meta(self, conn: sa.Connection, key: str) -> Optional[str]:
        return conn.execute(sa.select(self.meta.c.value).where(self.meta.c.key == key)).scalar_one_or_none()

    def set_meta(self, conn: sa.Connection, key: str, value: str) -> None:
        # portable upsert: UPDATE, then INSERT if nothing was there
        done = conn.execute(sa.update(self.meta).where(self.meta.c.key == key).values(value=str(value)))
        if not done.rowcount:
            conn.execute(sa.insert(self.meta).values(key=key, value=str(value)))


def migrate(conn: sa.Connection, t: Tables, fields: dict[str, FieldType], where: str) -> None:
    """Additive only: add columns for new scalar fields; refuse a field whose type changed."""
    old = json.loads(t.get_meta(conn, "fields") or "{}")
    for name, spec in old.items():
        if name in fields and fields[name].spec != spec:
            _type_changed(where, name, spec, fields[name].spec)
    existing = _columns(conn, t.documents)
    for f in fields.values():
        if f.is_list:
            if f.name in existing and f.name not in old:
                _type_changed(where, f.name, existing[f.name], f.spec)
            continue
        if f.name not in existing:
            ddl = sa.schema.CreateColumn(t.documents.c[f.name]).compile(dialect=conn.dialect)
            table = conn.dialect.identifier_preparer.format_table(t.documents)
            # identifiers only (field names are validated identifiers); no values reach this DDL
            conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {ddl}"))
        elif existing[f.name] != f.base:
            _type_changed(where, f.name, existing[f.name], f.spec)
    merged = {**old, **{n: f.spec for n, f in fields.items()}}
    if merged != old:
        t.set_meta(conn, "fields", json.dumps(merged, sort_keys=True))


def _columns(conn: sa.Connection, table: sa.Table) -> dict[str, str]:
    """Column name -> ragcost base type, from information_schema (duckdb-engine's reflection breaks on SQLAlchemy 2.1)."""
    i = _INFO.c
    q = sa.select(i.column_name, i.data_type).where(
        i.table_name == table.name, i.table_schema == sa.func.current_schema(),
        i.table_catalog == sa.func.current_database())
    return {name: _spec_of(str(t)) for name, t in conn.execute(q).all()}


def _type_changed(where: str, name: str, old: str, new: str) -> None:
    raise StoreError(
        f"{where}: metadata field {name!r} is {old} in the store but {new} in the pipeline; "
        f"keep it {old}, rename the field, or re-index into a new collection"
    )


def _spec_of(sql_name: str) -> str:
    """The ragcost base type of an information_schema data_type, or the SQL name itself."""
    base = sql_name.lower().split("(")[0].strip()
    return next((k for k, names in SQL_NAMES.items() if base in names), sql_name)
