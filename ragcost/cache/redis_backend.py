"""Entries in a Redis server (``backend: redis``), for teams that run one; needs the ``[redis]`` extra.

Each entry is a hash with Redis's own TTL, its exact key a string pointing at it, and a sorted set
of creation times that warm-up reads the vectors through. An entry is written in one MULTI/EXEC
transaction. Calls time out after ``socket_timeout`` seconds, so a restarting server makes misses,
never a stalled query; the stage turns every failure into a miss and one warning.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from ragcost.cache.backends import cache_backend_registry, checked, shown, stale, summarise, summary_row, to_evict
from ragcost.cache.entry import CacheEntry
from ragcost.errors import DependencyError

FIELDS = ("scope", "key", "created_at", "expires_at", "hit_count", "cost", "size_bytes", "vector", "payload", "checksum")


@cache_backend_registry.register("redis")
class RedisCache:
    def __init__(self, url: str, name: str, socket_timeout: float = 0.5) -> None:
        try:
            import redis
        except ImportError:
            raise DependencyError("cache backend 'redis' needs the redis package: pip install 'ragcost[redis]'") from None
        self.url, self.name = url, name
        self.bad: dict[str, str] = {}
        self.r = redis.Redis.from_url(url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout)
        self.p = f"rc:{name}:"

    def _e(self, entry_id: str) -> str:
        return f"{self.p}e:{entry_id}"

    def _k(self, scope: str, key: str) -> str:
        return f"{self.p}k:{scope}:{key}"

    def ping(self) -> None:
        self.r.ping()

    def put(self, entry: CacheEntry) -> None:
        ttl_ms = max(1, int((entry.expires_at - time.time()) * 1000))
        row = {"scope": entry.scope, "key": entry.key, "created_at": entry.created_at, "expires_at": entry.expires_at,
               "hit_count": entry.hit_count, "cost": entry.cost, "size_bytes": entry.size_bytes,
               "vector": entry.vector_bytes(), "payload": entry.payload(), "checksum": entry.checksum()}
        with self.r.pipeline(transaction=True) as tx:
            tx.hset(self._e(entry.id), mapping=row)
            tx.pexpire(self._e(entry.id), ttl_ms)
            tx.set(self._k(entry.scope, entry.key), entry.id, px=ttl_ms)
            tx.zadd(f"{self.p}created", {entry.id: entry.created_at})
            tx.execute()

    def _load(self, entry_id: str) -> Optional[dict[str, Any]]:
        raw = self.r.hgetall(self._e(entry_id))
        if not raw:
            return None
        row = {k.decode(errors="replace"): v for k, v in raw.items()}
        for f in FIELDS:
            if f != "vector" and isinstance(row.get(f), bytes):
                row[f] = row[f].decode(errors="replace")  # a flipped byte fails the checksum, not the read
        row["id"] = entry_id
        return row

    def get(self, entry_id: str) -> Optional[CacheEntry]:
        row = self._load(entry_id)
        return checked(row, self.bad) if row else None

    def get_exact(self, scope: str, key: str, now: float) -> Optional[CacheEntry]:
        entry_id = self.r.get(self._k(scope, key))
        if entry_id is None:
            return None
        e = self.get(entry_id.decode())
        return e if e is not None and e.expires_at > now else None

    def entries_since(self, since: float, now: float) -> list[CacheEntry]:
        out = []
        for raw_id in self.r.zrangebyscore(f"{self.p}created", f"({since}", "+inf"):
            e = self.get(raw_id.decode())
            if e is not None and e.expires_at > now:
                out.append(e)
        return out

    def touch(self, entry_ids: list[str]) -> None:
        for entry_id in entry_ids:
            if self.r.exists(self._e(entry_id)):
                self.r.hincrby(self._e(entry_id), "hit_count", 1)

    def observe(self, observations: list[tuple[str, float, bool]]) -> None:
        if observations:
            self.r.rpush(f"{self.p}obs", *(f"{e}|{float(sim)!r}|{int(ok)}" for e, sim, ok in observations))

    def observations(self) -> list[tuple[str, float, bool]]:
        out = []
        for raw in self.r.lrange(f"{self.p}obs", 0, -1):
            entry_id, sim, ok = raw.decode().split("|")
            out.append((entry_id, float(sim), ok == "1"))
        return out

    def _summary(self) -> list[dict[str, Any]]:
        rows = []
        for raw_id in self.r.zrange(f"{self.p}created", 0, -1):
            row = self._load(raw_id.decode())
            if row is None:
                self.r.zrem(f"{self.p}created", raw_id)  # expired by Redis itself
                continue
            rows.append(summary_row(row, self.bad))
        return rows

    def stats(self, now: float, live_version: Optional[str] = None) -> dict[str, Any]:
        return summarise(self._summary(), self.observations(), now, live_version)

    def _delete(self, rows: list[dict[str, Any]]) -> int:
        for r in rows:
            with self.r.pipeline(transaction=True) as tx:
                tx.delete(self._e(r["id"]))
                if r.get("scope") and r.get("key"):
                    tx.delete(self._k(r["scope"], r["key"]))
                tx.zrem(f"{self.p}created", r["id"])
                tx.execute()
        return len(rows)

    def clear(self) -> int:
        rows = self._summary()
        n = self._delete(rows)
        self.r.delete(f"{self.p}obs", f"{self.p}created")
        return n

    def prune(self, now: float, live_version: Optional[str] = None) -> int:
        return self._delete([r for r in self._summary() if stale(r, now, live_version)])

    def evict(self, max_bytes: int) -> int:
        rows = self._summary()
        drop = set(to_evict(rows, max_bytes))
        return self._delete([r for r in rows if r["id"] in drop])

    def close(self) -> None:
        self.r.close()

    def __repr__(self) -> str:
        return f"RedisCache({shown(self.url)})"
