"""pgvector: the vectors in a column of the store's chunk table, searched by PostgreSQL itself.

The column is ``vector(dim)`` (float32), ``halfvec(dim)`` (float16) or ``bit(dim)`` (binary, Hamming
distance), with an ``hnsw`` or ``ivfflat`` index made by ``CREATE INDEX`` (kind ``flat``: none, so
PostgreSQL scores every row exactly). A filter runs in the same statement (``label = ANY($1)`` for a
few labels, a bitmap of them for many) with pgvector's iterative index scans, so a selective filter
still returns k rows; when it does not, the short rows are scored exactly in SQL and reported, as
the other backends do.

Each build writes a new column (``rc_vec_<build>``) and its index, so the build a server is reading
stays whole until the artifact's manifest names the new one; older builds' columns are dropped by
the build after. The artifact's index file is a small JSON saying which table and column.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.errors import ConfigError, FingerprintError, RagcostError
from ragcost.index import pg_sql, sizes
from ragcost.index.base import NO_ROWS, FilteredResult, KindSpec, VectorIndex, index_registry
from ragcost.index.params import NoParams
from ragcost.index.pg_params import PgFlatSearch, PgHNSWBuild, PgHNSWSearch, PgIVFBuild, PgIVFSearch, auto_lists
from ragcost.index.pg_sql import COLUMN_TYPES, ident

_PRECISIONS = tuple(COLUMN_TYPES)
# Up to this many allowed labels the filter is ``label = ANY($1)``: PostgreSQL estimates the few rows
# and may read them by the label key and sort them (exact, ~1 ms). Above it, a bitmap of the labels
# (``get_bit``, one test per row the iterative scan meets): an array of 30,000 labels is checked
# linearly per row, 100-365 ms a query at 100k rows, the bitmap 12-14 ms (bench.filters).
ANY_MAX_LABELS = 2048
_BITMAP_MAX_BITS = 2**31 - 1  # get_bit's bit number is an int4 here


def _label_filter(allowed: np.ndarray) -> tuple[str, tuple]:
    """The SQL condition restricting rows to ``allowed`` (sorted int64), and its bound values."""
    base, top = int(allowed[0]), int(allowed[-1])
    span = top - base + 1
    if len(allowed) <= ANY_MAX_LABELS or span > min(_BITMAP_MAX_BITS, max(64 * len(allowed), 1 << 24)):
        return " AND label = ANY(%s)", (allowed.tolist(),)
    mask = np.zeros(span, dtype=bool)
    mask[allowed - base] = True
    bitmap = np.packbits(mask, bitorder="little").tobytes()  # get_bit numbers bits from each byte's low end
    return (" AND (CASE WHEN label - %s BETWEEN 0 AND %s THEN get_bit(%s::bytea, (label - %s)::int) = 1 "
            "ELSE false END)", (base, span - 1, bitmap, base))


_NO_STORE = ("index: backend pgvector keeps its vectors in the store's chunk table, so it needs the pipeline's "
             "store to be PostgreSQL (store: postgresql+psycopg://user@host:port/db); use backend: hnswlib or faiss "
             "with another store")


@index_registry.register("pgvector")
class PgvectorIndex(VectorIndex):
    """A pgvector column and index in the store's PostgreSQL database."""

    backend = "pgvector"
    kinds = {
        "flat": KindSpec(NoParams, PgFlatSearch, _PRECISIONS),
        "hnsw": KindSpec(PgHNSWBuild, PgHNSWSearch, _PRECISIONS, size=sizes.pgvector_hnsw_size,
                         size_source="bench.plan_ram"),
        "ivf_flat": KindSpec(PgIVFBuild, PgIVFSearch, ("float32", "float16"),
                             "pgvector's ivfflat indexes vector and halfvec; use kind: hnsw or flat for binary"),
    }
    suffix = "pgvector"
    store_schemes = ("postgresql",)

    def __init__(self, config: IndexConfig, dim: int, precision: str = "float32") -> None:
        super().__init__(config, dim, precision)
        self.column_type = COLUMN_TYPES[precision]
        self._check_dim()
        self._conn: Any = None
        self._url: Optional[str] = None
        self._table: Optional[str] = None
        self._column: Optional[str] = None
        self._index_name: Optional[str] = None
        self._count = 0
        self._index_bytes = 0
        self._settings: dict[str, Any] = {}  # the session's SET values, so a search sets only what changed
        self._lock = threading.Lock()  # one session: a search's SETs and statements must not interleave with another's

    def _check_dim(self) -> None:
        ct, kind = self.column_type, self.config.kind
        if kind != "flat" and self.dim > ct.index_max_dim:
            others = [f"precision: {p} ({t.sql}, up to {t.index_max_dim:,})" for p, t in COLUMN_TYPES.items()
                      if t.index_max_dim >= self.dim and (kind == "hnsw" or t.sql != "bit")]
            fix = " or ".join(others) if others else "a smaller embed.dim"
            raise ConfigError(f"index: backend pgvector kind {kind}: dim {self.dim} is above pgvector's index limit of "
                              f"{ct.index_max_dim:,} dims for {ct.sql}; use {fix} (halfvec/bit), reduce embed.dim, "
                              "or kind: flat")

    # ---- where ------------------------------------------------------------------------------
    def _location(self) -> tuple[str, str]:
        loc = self.config.store_location
        if loc is None:
            raise ConfigError(_NO_STORE)
        return loc

    def _connect(self, url: str) -> Any:
        if self._conn is None or self._conn.closed:
            conn = pg_sql.connect(url)
            pg_sql.ensure_extension(conn, url)
            self._conn, self._url, self._settings = conn, url, {}
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ---- build ------------------------------------------------------------------------------
    def build(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        """Load the vectors into a new column of the chunk table (created when the store has none), index it."""
        url, table = self._location()
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        labels = np.ascontiguousarray(labels, dtype=np.int64)
        conn = self._connect(url)
        t, ct = ident(table), self.column_type
        column = f"rc_vec_{time.time_ns():x}"
        col = ident(column)
        with conn.transaction():
            # A table of our own when the store has none (the index contract, a bench): label plus columns.
            conn.execute(f"CREATE TABLE IF NOT EXISTS {t} (label bigint PRIMARY KEY)")
            conn.execute(f"ALTER TABLE {t} ADD COLUMN {col} {ct.sql}({self.dim})")
            conn.execute(f"CREATE TEMP TABLE rc_load (label bigint, v vector({self.dim})) ON COMMIT DROP")
            if len(labels):
                pg_sql.copy_vectors(conn, "rc_load", labels, vectors)
            if self._own_table(conn, table):
                conn.execute(f"INSERT INTO {t} (label) SELECT label FROM rc_load ON CONFLICT DO NOTHING")
            conn.execute(f"UPDATE {t} SET {col} = {ct.convert.format('s.v')} FROM rc_load s WHERE {t}.label = s.label")
        self._table, self._column, self._count = table, column, len(labels)
        self._index_name = self._create_index(conn, t, col, len(labels))
        conn.execute(f"ANALYZE {t}")
        self._index_bytes = self._relation_bytes(conn)
        self._drop_older_builds(conn, table, column)

    def _own_table(self, conn: Any, table: str) -> bool:
        """True when the table is one this backend made (label only, no store columns)."""
        cols = conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                            "AND table_schema = current_schema()", (table,)).fetchall()
        return "doc_id" not in {c[0] for c in cols}

    def _create_index(self, conn: Any, t: str, col: str, n: int) -> Optional[str]:
        kind, ct = self.config.kind, self.column_type
        if kind == "flat" or n == 0:
            return None
        name = f"{self._column}_{'hnsw' if kind == 'hnsw' else 'ivf'}"
        p = self.build_params()
        if kind == "hnsw":
            with_ = f"m = {int(p.m)}, ef_construction = {int(p.ef_construction)}"
            method = "hnsw"
        else:
            lists = auto_lists(n) if p.lists == "auto" else int(p.lists)
            with_, method = f"lists = {lists}", "ivfflat"
        if self.config.threads:
            conn.execute(f"SET max_parallel_maintenance_workers = {max(self.config.threads - 1, 0)}")
        conn.execute(f"CREATE INDEX {ident(name)} ON {t} USING {method} ({col} {ct.opclass}) WITH ({with_})")
        return name

    def _relation_bytes(self, conn: Any) -> int:
        """The index relation's size plus the column's values: what the index holds."""
        index = 0
        if self._index_name:
            index = int(conn.execute("SELECT pg_relation_size(%s::regclass)", (ident(self._index_name),)).fetchone()[0])
        return index + self._count * self.column_type.bytes_per_value(self.dim)

    def _drop_older_builds(self, conn: Any, table: str, column: str) -> None:
        """Keep this build's column and the one before (still live until the new manifest commits)."""
        cols = sorted(c[0] for c in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND table_schema = current_schema() "
            "AND column_name LIKE 'rc\\_vec\\_%%'", (table,)).fetchall())
        older = [c for c in cols if c < column][:-1]
        for c in older:
            conn.execute(f"ALTER TABLE {ident(table)} DROP COLUMN IF EXISTS {ident(c)}")

    # ---- search -----------------------------------------------------------------------------
    def search(
        self,
        queries: np.ndarray,
        k: int,
        params: dict[str, Any] | None = None,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by inner product (binary: minus Hamming distance); ``allowed`` filters in the same statement."""
        with self._lock:
            return self._search(queries, k, params, allowed)[:2]

    def search_filtered(
        self, queries: np.ndarray, k: int, params: dict[str, Any] | None, allowed: np.ndarray
    ) -> FilteredResult:
        """Filtered top-k; rows the iterative scan left short are scored exactly in SQL and listed."""
        with self._lock:
            return self._search(queries, k, params, allowed)

    @classmethod
    def filtered_search_params(cls, config: IndexConfig, k: int, selectivity: float) -> Optional[dict[str, Any]]:
        """A candidate list (HNSW) or list count (IVFFlat) up to 2x wider as fewer rows are allowed.

        Not the other backends' 2/selectivity: the iterative scan already keeps walking until k rows
        pass, so the wider list only buys recall among them. bench.filters at 30% selectivity:
        ef_search 128 -> recall 0.93-0.98, 256 -> 0.98-0.99 (40-80 ms), 853 (2/selectivity) -> 1.0 at 400 ms.
        """
        factor = min(1.0 / max(selectivity, 1e-6), 2.0)
        s = config.search
        if config.kind == "hnsw":
            return {"ef_search": int(min(max(int(s.get("ef_search", 40)), k) * factor, 1000))}
        if config.kind == "ivf_flat":
            return {"probes": int(int(s.get("probes", 10)) * factor)}
        return None

    def _search(self, queries: np.ndarray, k: int, params: Optional[dict[str, Any]],
                allowed: Optional[np.ndarray]) -> FilteredResult:
        sp = self.search_params(params)
        queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        nq = len(queries)
        out_s = np.full((nq, max(k, 0)), -np.inf, dtype=np.float32)
        out_l = np.full((nq, max(k, 0)), -1, dtype=np.int64)
        if k <= 0 or self._count == 0 or nq == 0 or (allowed is not None and len(allowed) == 0):
            return FilteredResult(out_s, out_l, NO_ROWS)
        conn = self._live()
        self._apply(conn, sp, k)
        where, args = ("", ()) if allowed is None else _label_filter(np.asarray(allowed, dtype=np.int64))
        sql = self._query_sql(where)
        short = []
        for i, q in enumerate(queries):
            rows = self._run(conn, sql, q, args, k)
            self._fill(out_s, out_l, i, rows)
            if allowed is not None and len(rows) < min(k, self._count):
                short.append(i)
        if not short:
            return FilteredResult(out_s, out_l, NO_ROWS)
        present = self._present(conn, where, args)
        really = [i for i in short if (out_l[i] >= 0).sum() < min(k, present)]
        if not really:
            return FilteredResult(out_s, out_l, NO_ROWS)
        with conn.transaction():
            # No index scan: PostgreSQL scores every allowed row, exactly, still in one statement.
            conn.execute("SET LOCAL enable_indexscan = off")
            for i in really:
                self._fill(out_s, out_l, i, self._run(conn, sql, queries[i], args, k))
        return FilteredResult(out_s, out_l, np.asarray(really, dtype=np.int64))

    def search_one(self, query: np.ndarray, k: int) -> tuple[list[int], list[float]]:
        """One query, no filter, as Python lists."""
        scores, labels = self.search(np.asarray(query, dtype=np.float32).reshape(1, -1), k)
        return labels[0].tolist(), scores[0].tolist()

    def _query_sql(self, label_filter: str = "") -> str:
        t, col, ct = ident(self._table), ident(self._column), self.column_type
        q = ct.convert.format("%s::vector")
        return (f"SELECT label, {col} {ct.distance} {q} AS d FROM {t} WHERE {col} IS NOT NULL{label_filter} "
                "ORDER BY d LIMIT %s")

    @staticmethod
    def _run(conn: Any, sql: str, q: np.ndarray, filter_args: tuple, k: int) -> list[tuple]:
        return conn.execute(sql, (pg_sql.vector_literal(q), *filter_args, k), prepare=True).fetchall()

    def _fill(self, out_s: np.ndarray, out_l: np.ndarray, i: int, rows: list[tuple]) -> None:
        # relaxed_order scans may return rows slightly out of order: sort by score, ties by label.
        rows = sorted(rows, key=lambda r: (float(r[1]), int(r[0])))[: out_l.shape[1]]
        out_s[i] = -np.inf
        out_l[i] = -1
        if rows:
            out_l[i, : len(rows)] = [int(r[0]) for r in rows]
            out_s[i, : len(rows)] = [-float(r[1]) for r in rows]  # <#> is the negative inner product

    def _present(self, conn: Any, label_filter: str, filter_args: tuple) -> int:
        """How many allowed labels have a vector in this build."""
        t, col = ident(self._table), ident(self._column)
        return int(conn.execute(f"SELECT count(*) FROM {t} WHERE {col} IS NOT NULL{label_filter}",
                                filter_args).fetchone()[0])

    def _apply(self, conn: Any, sp: Any, k: int) -> None:
        """SET the session's search settings that differ from the last search's."""
        want: dict[str, Any] = {}
        if self.config.kind == "hnsw":
            want = {"hnsw.ef_search": max(sp.ef_search, min(k, 1000)), "hnsw.iterative_scan": sp.iterative_scan,
                    "hnsw.max_scan_tuples": sp.max_scan_tuples}
        elif self.config.kind == "ivf_flat":
            want = {"ivfflat.probes": sp.probes, "ivfflat.iterative_scan": sp.iterative_scan,
                    "ivfflat.max_probes": sp.max_probes or 32768}
        for name, value in want.items():
            if self._settings.get(name) != value:
                conn.execute(f"SET {name} = {value if isinstance(value, int) else repr(value)}")
                self._settings[name] = value

    def _live(self) -> Any:
        if self._table is None:
            raise RagcostError("index: backend pgvector has no built column; build or load it first")
        return self._connect(self._url or self._location()[0])

    # ---- the artifact's index file ------------------------------------------------------------
    def save(self, path: Path) -> None:
        """Write which database, table, column and index hold this build (no password)."""
        Path(path).write_text(json.dumps({
            "format": 1, "url": pg_sql.without_password(self._url or ""), "table": self._table, "column": self._column,
            "index": self._index_name, "kind": self.config.kind, "precision": self.precision, "dim": self.dim,
            "count": self._count, "index_bytes": self._index_bytes}, sort_keys=True))

    def load(self, path: Path) -> None:
        """Reconnect to the build ``save`` described (the pipeline's store URL first, with its password)."""
        info = json.loads(Path(path).read_text())
        loc = self.config.store_location
        url = loc[0] if loc is not None else info["url"]
        self._table, self._column, self._index_name = info["table"], info["column"], info["index"]
        self._count, self._index_bytes = int(info["count"]), int(info["index_bytes"])
        conn = self._connect(url)
        found = conn.execute("SELECT 1 FROM information_schema.columns WHERE table_name = %s AND column_name = %s "
                             "AND table_schema = current_schema()", (self._table, self._column)).fetchone()
        if found is None:
            raise FingerprintError(f"index: pgvector column {self._column} of table {self._table} in {pg_sql.shown(url)} "
                                   "is gone (a later build dropped it, or the table was recreated); "
                                   "run `ragcost index PIPELINE` to rebuild")

    def nbytes(self) -> int:
        """The index relation's bytes plus the column's values (as the heap stores them)."""
        return self._index_bytes

    def __len__(self) -> int:
        return self._count
