"""The SQL backend on DuckDB and PostgreSQL (real), and crash safety under kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ragcost.cache import CacheEntry, open_backend

REPO = Path(__file__).resolve().parents[2]


def entry(scope="s", key="k", text="q", n=0, ttl=100.0, cost=1.0, version="v1") -> CacheEntry:
    now = time.time()
    return CacheEntry(scope=scope, key=key, text=text, vector=np.full(8, n + 1, np.float32), answer=f"a{n}",
                      citations=["d1"], hits=[{"label": 1, "doc_id": "d1", "score": 0.9}], created_at=now,
                      expires_at=now + ttl, cost=cost, version=version)


import pytest


@pytest.fixture(params=["duckdb", "postgres", "redis"])
def backend(request, tmp_path):
    import uuid

    if request.param == "redis":
        import ragcost.cache.redis_backend  # noqa: F401

        return open_backend("redis", request.getfixturevalue("redis_url"), f"t{uuid.uuid4().hex[:8]}")
    url = f"duckdb:///{tmp_path}/nested/store.duckdb" if request.param == "duckdb" else request.getfixturevalue("postgres_url")
    return open_backend("sql", url, "kb")


class TestBackends:
    def test_round_trip_scope_ttl_stats_prune_and_clear(self, backend):
        b = backend
        try:
            b.put(entry())
            b.put(entry(scope="other", n=1, version="v0"))
            b.put(entry(key="gone", n=2, ttl=0.001))
            time.sleep(0.01)
            now = time.time()
            got = b.get_exact("s", "k", now)
            assert got is not None and got.answer == "a0" and got.hits[0]["doc_id"] == "d1"
            assert b.get_exact("other-tenant", "k", now) is None
            assert b.get_exact("s", "gone", now) is None  # expired
            assert len(b.entries_since(0, now)) == 2
            b.observe([(got.id, 0.93, False)])
            b.touch([got.id])
            st = b.stats(now, live_version="v1")
            # Redis expires "gone" by itself; SQL keeps it until prune
            assert (st["entries"] - st["stale"], st["live"], st["hits"], st["verified_wrong"]) == (1, 1, 1, 1)
            assert b.prune(now, live_version="v1") in (1, 2)  # redis may have expired "gone" itself
            assert b.stats(now)["entries"] == 1
            assert b.clear() == 1 and b.stats(now)["entries"] == 0
        finally:
            b.close()

    def test_eviction_keeps_the_byte_limit(self, backend):
        b = backend
        try:
            for i in range(5):
                b.put(entry(key=f"k{i}", n=i, cost=float(i)))
            size = entry().size_bytes
            assert b.evict(2 * size) == 3
            assert len(b.entries_since(0, time.time())) == 2 and b.stats(time.time())["entries"] == 2
        finally:
            b.close()


WRITER = """
import sys, time
sys.path.insert(0, {repo!r})
from tests.cache.test_backend import entry
from ragcost.cache import open_backend
b = open_backend("sql", {url!r}, "kb")
i = 0
while True:
    b.put(entry(key=f"k{{i}}", n=i, text="x" * 2000))
    i += 1
    if i == 20:
        print("ready", flush=True)
"""


def test_kill_9_during_writes_leaves_every_row_whole(tmp_path):
    url = f"duckdb:///{tmp_path}/crash.duckdb"
    proc = subprocess.Popen([sys.executable, "-c", WRITER.format(repo=str(REPO), url=url)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    b = open_backend("sql", url, "kb")
    try:
        total, good = b.verify_rows()
        assert total >= 20 and good == total  # checksums over every stored byte
        assert b.get_exact("s", "k0", time.time()).answer == "a0"
        b.put(entry(key="after"))  # and it still takes writes
    finally:
        b.close()
