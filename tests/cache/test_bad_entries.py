"""Entries fail alone: a truncated, a bit-flipped and a field-deleted entry are skipped, counted, reported once, pruned."""

from __future__ import annotations

import json
import time
import uuid
import warnings

import pytest

from ragcost.cache import open_backend
from tests.cache.conftest import CACHED, pipeline
from tests.cache.test_backend import entry
from tests.cache.test_stage import ask
from tests.cli.conftest import run_cli, write_pipeline


def _sql_row(b, entry_id):
    with b.engine.connect() as c:
        return dict(c.execute(b.entries.select().where(b.entries.c.id == entry_id)).one()._mapping)


def _sql_set(b, entry_id, **values):
    with b.engine.begin() as c:
        c.execute(b.entries.update().where(b.entries.c.id == entry_id).values(**values))


def corrupt_three(b, ids: list[str]) -> None:
    """Truncate one payload, flip one bit of another, delete a field of a third (the answer)."""
    if hasattr(b, "engine"):
        p0 = _sql_row(b, ids[0])["payload"]
        _sql_set(b, ids[0], payload=p0[: len(p0) // 2])
        p1 = _sql_row(b, ids[1])["payload"]
        i = p1.index('"answer":"') + 10
        _sql_set(b, ids[1], payload=p1[:i] + chr(ord(p1[i]) ^ 1) + p1[i + 1:])
        p2 = json.loads(_sql_row(b, ids[2])["payload"])
        del p2["answer"]
        _sql_set(b, ids[2], payload=json.dumps(p2))
    else:  # redis: the same three on the entry's hash
        r = b.r
        p0 = r.hget(b._e(ids[0]), "payload")
        r.hset(b._e(ids[0]), "payload", p0[: len(p0) // 2])
        v = bytearray(r.hget(b._e(ids[1]), "vector"))
        v[3] ^= 0x01
        r.hset(b._e(ids[1]), "vector", bytes(v))
        r.hdel(b._e(ids[2]), "payload")


@pytest.fixture(params=["duckdb", "postgres", "redis"])
def backend(request, tmp_path):
    if request.param == "redis":
        import ragcost.cache.redis_backend  # noqa: F401

        b = open_backend("redis", request.getfixturevalue("redis_url"), f"t{uuid.uuid4().hex[:8]}")
    else:
        url = f"duckdb:///{tmp_path}/store.duckdb" if request.param == "duckdb" else request.getfixturevalue("postgres_url")
        b = open_backend("sql", url, f"bad{uuid.uuid4().hex[:6]}")
    yield b
    try:
        b.clear()
    finally:
        b.close()


class TestBackendsSkipBadEntries:
    def test_three_bad_entries_are_skipped_counted_and_pruned_and_the_others_served(self, backend):
        b = backend
        es = [entry(key=f"k{i}", n=i) for i in range(5)]
        for e in es:
            b.put(e)
        corrupt_three(b, [e.id for e in es[:3]])
        now = time.time()
        live = b.entries_since(0, now)
        assert sorted(e.id for e in live) == sorted(e.id for e in es[3:])
        assert b.get_exact("s", "k4", now).answer == "a4" and b.get_exact("s", "k0", now) is None
        st = b.stats(now, live_version="v1")
        assert (st["entries"], st["live"], st["bad"], st["stale"]) == (5, 2, 3, 0)
        assert {x["id"] for x in st["bad_entries"]} == {e.id for e in es[:3]}
        assert b.prune(now, live_version="v1") == 3
        st = b.stats(now, live_version="v1")
        assert (st["entries"], st["live"], st["bad"]) == (2, 2, 0)

    def test_a_torn_vector_or_a_missing_checksum_is_bad_not_a_crash(self, backend):
        b = backend
        e = entry()
        b.put(e)
        if hasattr(b, "engine"):
            _sql_set(b, e.id, vector=b"\x00\x01\x02")
        else:
            b.r.hdel(b._e(e.id), "checksum")
        assert b.entries_since(0, time.time()) == [] and e.id in b.bad
        assert b.stats(time.time())["bad"] == 1


    def test_a_nan_expiry_is_bad_never_served_and_pruned(self, backend):
        """issue 39 (rough): a NaN expires_at kept an entry alive forever (NaN is never <= now)."""
        b = backend
        e, ok = entry(key="k0", n=0), entry(key="k1", n=1)
        b.put(e)
        b.put(ok)
        if hasattr(b, "engine"):
            _sql_set(b, e.id, expires_at=float("nan"))
        else:
            b.r.hset(b._e(e.id), "expires_at", "nan")
        now = time.time()
        assert b.get_exact("s", "k0", now) is None and [x.id for x in b.entries_since(0, now)] == [ok.id]
        assert b.prune(now, live_version="v1") == 1
        assert b.stats(now, live_version="v1")["entries"] == 1


def _filled(kb_folder, stages):
    pipe = pipeline(kb_folder, stages=stages)
    pipe.warm_up()
    h = pipe.stage("cache").handle
    h.backend.clear()
    qs = ["How do I reset my password?", "What are the API rate limits?", "Where do I download invoices?",
          "How do I cancel my subscription?", "How do I export my data?"]
    for q in qs:
        ask(pipe, q)
    ids = {e.question: e.id for e in h.backend.entries_since(0, time.time())}
    pipe.close()
    return qs, ids


@pytest.mark.parametrize("kind", ["sql", "redis"])
def test_a_pipeline_keeps_serving_the_others_warns_once_and_the_cli_counts_and_prunes(kb_folder, capsys, kind, request):
    stages = CACHED
    if kind == "redis":  # a server of this test's own: the pipeline's keys are named after it (kb)
        url = request.getfixturevalue("own_redis").url
        stages = [{"type": "cache", "backend": "redis", "url": url}, *CACHED[1:]]
    qs, ids = _filled(kb_folder, stages)
    pipe = pipeline(kb_folder, stages=stages)
    try:
        pipe.warm_up()
        corrupt_three(pipe.stage("cache").handle.backend, [ids[q] for q in qs[:3]])
    finally:
        pipe.close()
    pipe = pipeline(kb_folder, stages=stages)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pipe.warm_up()
            for q in qs:
                ask(pipe, q)
            served = [ask(pipe, q) for q in qs[3:]]
        bad = [w for w in caught if "bad entr" in str(w.message)]
        assert len(bad) == 1 and "skipped 3 bad entries" in str(bad[0].message) and "cache prune" in str(bad[0].message)
        assert all(s.cache is not None and s.cache["tier"] == "exact" and s.answer for s in served)
    finally:
        pipe.close()
    path = kb_folder / "kb.yaml"
    code, out, _ = run_cli(capsys, "cache", "stats", path)
    st = json.loads(out)
    assert code == 0 and st["bad"] == 3
    code, out, _ = run_cli(capsys, "cache", "prune", path)
    assert code == 0 and out.strip().endswith("and 3 bad ones")
    code, out, _ = run_cli(capsys, "cache", "stats", path)
    assert json.loads(out)["bad"] == 0
    write_pipeline(kb_folder, stages=CACHED)


class TestOutage:
    def test_redis_down_warns_once_for_many_queries_and_comes_back(self, kb_folder, own_redis):
        pipe = pipeline(kb_folder, stages=[{"type": "cache", "backend": "redis", "url": own_redis.url, "refresh_s": 0}, *CACHED[1:]])
        try:
            ask(pipe)
            own_redis.stop()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                down = [ask(pipe, q) for q in ("How do I reset my password?", "What are the API rate limits?",
                                               "Where do I download invoices?")]
            assert [w for w in caught if "continuing uncached" in str(w.message)].__len__() == 1
            assert all(s.ok and s.answer and s.cache is None for s in down)
            own_redis.start()
            ask(pipe, "How do I export my data?")
            assert ask(pipe, "How do I export my data?").cache["tier"] == "exact"
        finally:
            pipe.close()

    @pytest.mark.parametrize("command", ["stats", "clear", "prune"])
    def test_cache_commands_during_an_outage_are_one_line_with_the_url_and_the_fix(self, kb_folder, capsys, tmp_path, command):
        path = write_pipeline(tmp_path, stages=[{"type": "cache", "backend": "redis", "url": "redis://127.0.0.1:1/0"}, *CACHED[1:]])
        code, out, err = run_cli(capsys, "cache", command, path)
        assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
        assert "redis://127.0.0.1:1/0" in err and "start the server" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["stats", "clear", "prune"])
def test_cache_commands_on_a_pipeline_without_a_store_create_nothing(tmp_path, capsys, command):
    from tests.cli.conftest import write_corpus

    write_corpus(tmp_path / "kb.jsonl")
    path = write_pipeline(tmp_path, stages=CACHED)
    code, out, err = run_cli(capsys, "cache", command, path)
    assert code == 0, err
    assert not (tmp_path / "kb.duckdb").exists() and not (tmp_path / "index").exists()
    assert ("no cache store yet" in out) if command != "stats" else json.loads(out)["entries"] == 0
