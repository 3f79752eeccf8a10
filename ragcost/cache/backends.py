"""Where cache entries live: one protocol, a registry by name, and the SQL backend (the pipeline's own store).

The SQL backend keeps one table ``rc_<name>_cache`` (and ``rc_<name>_cache_obs``, the verified
observations the false-hit bound learns from) on the pipeline's store URL: DuckDB or PostgreSQL
through SQLAlchemy. Every entry is written in one transaction, so a process killed mid-write
leaves the table readable and every row whole.
"""

from __future__ import annotations

import re
import time
from typing import Any, Iterable, Optional, Protocol

from ragcost.cache.entry import BadEntry, CacheEntry
from ragcost.errors import StoreError
from ragcost.registry import Registry
from ragcost.urls import shown_url, url_problem, without_secrets


class CacheBackend(Protocol):
    """Storage of entries and observations; lookups never return expired entries, nor bad ones.

    An entry that fails its check on read (unreadable, a field missing, checksum mismatch) is
    skipped and remembered in ``bad`` (id -> reason): it fails alone, every other entry is served;
    ``stats`` counts it and ``prune`` removes it.
    """

    url: str
    bad: dict[str, str]

    def put(self, entry: CacheEntry) -> None: ...
    def get_exact(self, scope: str, key: str, now: float) -> Optional[CacheEntry]: ...
    def get(self, entry_id: str) -> Optional[CacheEntry]: ...
    def entries_since(self, since: float, now: float) -> list[CacheEntry]:
        """Live entries created after ``since`` (warm-up reads them all; later calls what other processes added)."""
    def touch(self, entry_ids: list[str]) -> None:
        """Count one hit per id (ids may repeat), in one transaction."""
    def observe(self, observations: list[tuple[str, float, bool]]) -> None:
        """Store (entry id, similarity, correct) checks, in one transaction."""
    def observations(self) -> list[tuple[str, float, bool]]: ...
    def stats(self, now: float, live_version: Optional[str] = None) -> dict[str, Any]: ...
    def clear(self) -> int: ...
    def prune(self, now: float, live_version: Optional[str] = None) -> int: ...
    def evict(self, max_bytes: int) -> int: ...
    def close(self) -> None: ...


cache_backend_registry: Registry[type] = Registry("cache backend")


def table_name(name: str) -> str:
    safe = re.sub(r"[^a-z0-9_]", "_", name.lower())
    return f"rc_{safe}_cache"


def shown(url: str) -> str:
    """The URL without its password, for messages."""
    return shown_url(url)


def store_exists(url: str) -> bool:
    """False only for a DuckDB file URL whose file is not there (opening it would create it)."""
    from ragcost.urls import db_file

    file = db_file(url, ("duckdb",))
    return True if file is None else file.is_file()


def open_backend(kind: str, url: str, name: str) -> CacheBackend:
    cls = cache_backend_registry.get(kind)
    return cls(url, name)


@cache_backend_registry.register("sql")
class SQLCache:
    """Entries in the pipeline's SQL store (DuckDB or PostgreSQL)."""

    def __init__(self, url: str, name: str) -> None:
        import sqlalchemy as sa

        self.url, self.name = url, name
        self.bad: dict[str, str] = {}
        md = sa.MetaData()
        t = table_name(name)
        self.entries = sa.Table(
            t, md,
            sa.Column("id", sa.String(32), primary_key=True),
            sa.Column("scope", sa.String(32), nullable=False, index=True),
            sa.Column("key", sa.String(40), nullable=False, index=True),
            sa.Column("created_at", sa.Double, nullable=False),
            sa.Column("expires_at", sa.Double, nullable=False),
            sa.Column("hit_count", sa.Integer, nullable=False),
            sa.Column("cost", sa.Double, nullable=False),
            sa.Column("size_bytes", sa.Integer, nullable=False),
            sa.Column("vector", sa.LargeBinary),
            sa.Column("payload", sa.Text, nullable=False),
            sa.Column("checksum", sa.String(32), nullable=False),
        )
        self.obs = sa.Table(
            f"{t}_obs", md,
            sa.Column("entry_id", sa.String(32), nullable=False),
            sa.Column("similarity", sa.Double, nullable=False),
            sa.Column("correct", sa.Boolean, nullable=False),
            sa.Column("observed_at", sa.Double, nullable=False),
        )
        problem = url_problem(url)
        if problem:
            raise StoreError(f"cache store {problem}; fix url: on the cache stage, or the pipeline's store")
        try:
            from ragcost.urls import db_file

            file = db_file(url, ("duckdb",))
            if file is not None:
                file.parent.mkdir(parents=True, exist_ok=True)
            self.engine = sa.create_engine(url)
            from ragcost.store.ddl import ddl_lock

            with self.engine.begin() as conn:
                ddl_lock(conn, t)  # replicas opening one fresh PostgreSQL cache at once
                md.create_all(conn, checkfirst=True)
        except Exception as e:
            err = StoreError(f"cache store {shown(url)}: cannot open ({type(e).__name__}: "
                             f"{without_secrets(str(e).splitlines()[0], url) if str(e) else ''}); check the pipeline's store URL")
            err.orig = e  # the driver's error: a caller above the store can tell a held DuckDB lock by it
            raise err from None

    def _rows(self, stmt) -> list[dict[str, Any]]:
        with self.engine.connect() as c:
            return [dict(r._mapping) for r in c.execute(stmt)]

    def put(self, entry: CacheEntry) -> None:
        row = {"id": entry.id, "scope": entry.scope, "key": entry.key, "created_at": entry.created_at,
               "expires_at": entry.expires_at, "hit_count": entry.hit_count, "cost": entry.cost,
               "size_bytes": entry.size_bytes, "vector": entry.vector_bytes(), "payload": entry.payload(),
               "checksum": entry.checksum()}
        with self.engine.begin() as c:  # one transaction per entry: a kill leaves it whole or absent
            c.execute(self.entries.insert().values(**row))

    def _entry(self, row: dict[str, Any]) -> Optional[CacheEntry]:
        return checked(row, self.bad)

    def _one(self, stmt) -> Optional[CacheEntry]:
        rows = self._rows(stmt.limit(1))
        return self._entry(rows[0]) if rows else None

    def get_exact(self, scope: str, key: str, now: float) -> Optional[CacheEntry]:
        t = self.entries
        return self._one(t.select().where(t.c.scope == scope, t.c.key == key, t.c.expires_at > now)
                         .order_by(t.c.created_at.desc()))

    def get(self, entry_id: str) -> Optional[CacheEntry]:
        return self._one(self.entries.select().where(self.entries.c.id == entry_id))

    def entries_since(self, since: float, now: float) -> list[CacheEntry]:
        t = self.entries
        found = (self._entry(r) for r in self._rows(t.select().where(t.c.created_at > since, t.c.expires_at > now)))
        return [e for e in found if e is not None]

    def touch(self, entry_ids: list[str]) -> None:
        from collections import Counter

        t = self.entries
        with self.engine.begin() as c:
            for entry_id, n in Counter(entry_ids).items():
                c.execute(t.update().where(t.c.id == entry_id).values(hit_count=t.c.hit_count + n))

    def observe(self, observations: list[tuple[str, float, bool]]) -> None:
        if not observations:
            return
        now = time.time()
        with self.engine.begin() as c:
            c.execute(self.obs.insert(), [{"entry_id": e, "similarity": float(sim), "correct": bool(ok), "observed_at": now}
                                          for e, sim, ok in observations])

    def observations(self) -> list[tuple[str, float, bool]]:
        import sqlalchemy as sa

        o = self.obs
        with self.engine.connect() as c:
            return [(r[0], float(r[1]), bool(r[2])) for r in c.execute(sa.select(o.c.entry_id, o.c.similarity, o.c.correct))]

    def _summary(self) -> list[dict[str, Any]]:
        return [summary_row(r, self.bad) for r in self._rows(self.entries.select())]

    def stats(self, now: float, live_version: Optional[str] = None) -> dict[str, Any]:
        rows = self._summary()
        obs = self.observations()
        return summarise(rows, obs, now, live_version)

    def _delete(self, ids: Iterable[str]) -> int:
        ids = list(ids)
        t = self.entries
        for i in range(0, len(ids), 500):
            with self.engine.begin() as c:
                c.execute(t.delete().where(t.c.id.in_(ids[i:i + 500])))
        return len(ids)

    def clear(self) -> int:
        with self.engine.begin() as c:
            n = c.execute(self.entries.delete()).rowcount
            c.execute(self.obs.delete())
        return max(n, 0)

    def prune(self, now: float, live_version: Optional[str] = None) -> int:
        return self._delete(r["id"] for r in self._summary() if stale(r, now, live_version))

    def evict(self, max_bytes: int) -> int:
        return self._delete(to_evict(self._summary(), max_bytes))

    def verify_rows(self) -> tuple[int, int]:
        """(rows, rows that pass their check): a crash-safety check."""
        rows = self._summary()
        return len(rows), sum(1 for r in rows if not r.get("bad"))

    def close(self) -> None:
        self.engine.dispose()


def checked(row: dict[str, Any], bad: dict[str, str]) -> Optional[CacheEntry]:
    """The row's entry, or None (and its id and reason put in ``bad``) when it fails its check."""
    try:
        return CacheEntry.from_stored(row)
    except BadEntry as e:
        bad[e.entry_id] = e.reason
        return None


def summary_row(row: dict[str, Any], bad: dict[str, str]) -> dict[str, Any]:
    """What stats, prune and evict need of one stored row; a row that fails its check has ``bad`` set."""
    e = checked(row, bad)
    if e is None:
        return {"id": str(row.get("id") or "?"), "scope": row.get("scope"), "key": row.get("key"),
                "expires_at": 0.0, "hit_count": 0, "cost": 0.0, "created_at": 0.0, "version": None,
                "size_bytes": sum(len(v) for v in row.values() if isinstance(v, (str, bytes))),
                "bad": bad.get(str(row.get("id") or "?"), "unreadable")}
    return {"id": e.id, "scope": e.scope, "key": e.key, "expires_at": e.expires_at, "hit_count": e.hit_count,
            "cost": e.cost, "size_bytes": int(row.get("size_bytes") or e.size_bytes), "created_at": e.created_at,
            "version": e.version}


def stale(row: dict[str, Any], now: float, live_version: Optional[str]) -> bool:
    """Expired, made under other versions, or bad: unreachable, and ``prune`` removes it."""
    if row.get("bad"):
        return True
    # not "<= now": a NaN expiry is never <= now and would keep the entry alive forever
    return not row["expires_at"] > now or (live_version is not None and row.get("version") != live_version)


def to_evict(rows: list[dict[str, Any]], max_bytes: int) -> list[str]:
    """Ids to drop until the rest fit in ``max_bytes``: least value (hits × cost saved) first, then oldest."""
    total = sum(r["size_bytes"] for r in rows)
    out: list[str] = []
    for r in sorted(rows, key=lambda r: (not r.get("bad"), max(r["hit_count"], 1) * r["cost"], r["created_at"])):
        if total <= max_bytes:
            break
        out.append(r["id"])
        total -= r["size_bytes"]
    return out


def summarise(rows: list[dict[str, Any]], obs: list[tuple[str, float, bool]], now: float,
              live_version: Optional[str]) -> dict[str, Any]:
    from ragcost.cache.bound import wilson_upper

    live = [r for r in rows if not stale(r, now, live_version)]
    bad = [r for r in rows if r.get("bad")]
    wrong = sum(1 for _, _, ok in obs if not ok)
    return {
        "entries": len(rows), "live": len(live), "stale": len(rows) - len(live) - len(bad), "bad": len(bad),
        "bad_entries": [{"id": r["id"], "reason": r["bad"]} for r in bad[:10]],
        "bytes": sum(r["size_bytes"] for r in rows), "hits": sum(r["hit_count"] for r in rows),
        "verified": len(obs), "verified_wrong": wrong,
        "wrong_rate_upper95": round(wilson_upper(wrong, len(obs), 0.95), 4) if obs else None,
    }
