"""PostgreSQL plumbing of the pgvector backend: connecting, the extension, column types, bulk loading.

psycopg (the ``postgres`` extra) is imported lazily. A store URL is SQLAlchemy's
(``postgresql+psycopg://user@host:port/db``); libpq is given the same URL without the driver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragcost.errors import ConfigError, DependencyError, RagcostError
from ragcost.urls import shown_url, without_secrets

INSTALL = "pip install 'ragcost[postgres]'"


@dataclass(frozen=True)
class ColumnType:
    """How one precision is stored: the SQL type, its index operator class and distance, its index limit."""

    sql: str  # vector / halfvec / bit
    opclass: str
    distance: str  # the operator whose ORDER BY an index serves
    index_max_dim: int
    convert: str  # SQL turning a float32 ``vector`` expression {} into this type

    def bytes_per_value(self, dim: int) -> int:
        """Bytes one stored value takes in the heap: varlena header and pgvector's own header, then the data."""
        if self.sql == "bit":
            return 4 + 4 + (dim + 7) // 8
        return 4 + 4 + dim * (2 if self.sql == "halfvec" else 4)


# pgvector 0.8: an index over vector takes up to 2,000 dims, halfvec 4,000, bit 64,000.
COLUMN_TYPES = {
    "float32": ColumnType("vector", "vector_ip_ops", "<#>", 2000, "{}"),
    "float16": ColumnType("halfvec", "halfvec_ip_ops", "<#>", 4000, "({})::halfvec"),
    "binary": ColumnType("bit", "bit_hamming_ops", "<~>", 64000, "binary_quantize({})"),
}


def shown(url: str) -> str:
    """A URL as messages show it: its password as ***, through the one helper every message uses."""
    return shown_url(url)


def without_password(url: str) -> str:
    """A URL as the saved index file keeps it: no password at all (a reload uses the pipeline's store URL)."""
    return re.sub(r"(://[^:/@\s]+):\S*@", r"\1@", url)


def libpq_url(url: str) -> str:
    """SQLAlchemy's ``postgresql+driver://`` as libpq's ``postgresql://``."""
    return re.sub(r"^postgres(ql)?(\+[a-z0-9_]+)?://", "postgresql://", url)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as e:
        raise DependencyError(f"backend pgvector needs psycopg: {INSTALL}") from e
    return psycopg


def connect(url: str) -> Any:
    """An autocommit psycopg connection; a failure is one line naming the URL."""
    psycopg = _psycopg()
    if not re.match(r"^postgres(ql)?(\+[a-z0-9_]+)?://", url):
        raise ConfigError(f"index: backend pgvector keeps its vectors in PostgreSQL, but the store is {shown(url)}; "
                          "use store: postgresql+psycopg://user@host:port/db, or backend: hnswlib or faiss")
    try:
        return psycopg.connect(libpq_url(url), autocommit=True, connect_timeout=10)
    except psycopg.Error as e:
        raise RagcostError(f"index: backend pgvector cannot connect to {shown(url)} ({without_secrets(first_line(e), url)}); "
                           "check the URL and that the database is running") from None


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def ensure_extension(conn: Any, url: str) -> str:
    """pgvector's version, creating the extension when missing; one line saying why when that fails."""
    psycopg = _psycopg()
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    if row is None:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as e:
            raise DependencyError(f"index: backend pgvector: CREATE EXTENSION vector failed on {shown(url)} "
                                  f"({_why(e)}); {_fix(e)}") from None
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return str(row[0])


def _why(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return msg


def _fix(e: BaseException) -> str:
    low = str(e).lower()
    if "not available" in low or "could not open extension control file" in low:
        return ("the server has no pgvector installed: install it on the database server (a package such as "
                "postgresql-NN-pgvector, or pgvector built from source), or use scripts/start_pgvector.sh")
    if "permission denied" in low or "must be" in low:
        return "the user may not create extensions: ask an administrator to run CREATE EXTENSION vector in this database"
    return "run CREATE EXTENSION vector in this database as an administrator"


def ident(name: str) -> str:
    """A quoted SQL identifier (names here are ours: letters, digits and underscores)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ConfigError(f"index: backend pgvector: {name!r} is not a plain SQL name; use letters, digits and _")
    return f'"{name}"'


def copy_vectors(conn: Any, table: str, labels: np.ndarray, vectors: np.ndarray, rows_per_write: int = 4096) -> None:
    """COPY (label, vector) rows in PostgreSQL's binary format, built by numpy: no per-value Python work."""
    n, dim = vectors.shape
    row = np.dtype([("nfields", ">i2"), ("len_label", ">i4"), ("label", ">i8"), ("len_vec", ">i4"),
                    ("dim", ">i2"), ("unused", ">i2"), ("v", ">f4", (dim,))])
    with conn.cursor() as cur, cur.copy(f"COPY {table} (label, v) FROM STDIN (FORMAT BINARY)") as cp:
        cp.write(b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8)  # signature, flags, header extension length
        for start in range(0, n, rows_per_write):
            part = slice(start, start + rows_per_write)
            buf = np.empty(len(labels[part]), dtype=row)
            buf["nfields"], buf["len_label"], buf["label"] = 2, 8, labels[part]
            buf["len_vec"], buf["dim"], buf["unused"], buf["v"] = 4 + 4 * dim, dim, 0, vectors[part]
            cp.write(buf.tobytes())
        cp.write(b"\xff\xff")  # the end-of-data marker


def vector_literal(q: np.ndarray) -> str:
    """A float32 query as pgvector's text form; str() of each float32-as-double parses back to the same float32."""
    return "[" + ",".join(map(str, q.tolist())) + "]"
