"""A batch process's lifetime heartbeats: after a batch, at most once every ``every_s`` seconds."""

from __future__ import annotations

import time

import sqlalchemy as sa

from ragcost.cost.ledger import Ledger
from ragcost.cost.lifetime import BATCH_HEARTBEAT_S, Beat


def _heartbeat_at(url: str, life: str):
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return c.execute(sa.text("select heartbeat_at from rc_ledger_lifetimes where lifetime_id = :l"), {"l": life}).scalar()
    finally:
        engine.dispose()


def test_a_beat_is_written_only_once_its_interval_has_passed(tmp_path):
    url = f"duckdb:///{tmp_path / 'l.duckdb'}"
    led = Ledger(url)
    life = led.start_lifetime("batch", "p", "cpu", led.start_run("query", "p", "v"))
    led.close()
    first = _heartbeat_at(url, life)
    led = Ledger(url)
    slow = Beat(led, life, every_s=3600)
    assert not any(slow.after_batch() for _ in range(50))  # fifty one-query batches in well under an hour: no write
    led.close()
    assert _heartbeat_at(url, life) == first
    led = Ledger(url)
    fast = Beat(led, life, every_s=0.05)
    time.sleep(0.06)
    assert fast.after_batch() and not fast.after_batch()  # the interval restarts at each beat
    led.close()
    assert _heartbeat_at(url, life) > first


def test_query_time_beats_at_most_once_a_second_one_query_at_a_time(tmp_path, monkeypatch):
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline
    from ragcost.runtime.query import run_queries
    from tests.cli.conftest import write_corpus, write_pipeline

    beats: list[float] = []
    real = Ledger.heartbeat
    monkeypatch.setattr(Ledger, "heartbeat", lambda self, *a, **k: (beats.append(time.monotonic()), real(self, *a, **k))[1])
    write_corpus(tmp_path / "kb.jsonl")
    pipe = Pipeline.load(write_pipeline(tmp_path))
    try:
        run_index(pipe)
        t0 = time.monotonic()
        run = run_queries(pipe, [(f"q{i}", t) for i, t in enumerate(["refund", "password", "api limits"] * 10)], batch_size=1)
        took = time.monotonic() - t0
    finally:
        pipe.close()
    assert len(run.states) == 30
    # one beat per query before; now one per elapsed BATCH_HEARTBEAT_S at most (the lifetime's stop writes the last)
    assert len(beats) <= took / BATCH_HEARTBEAT_S + 1, (len(beats), took)
    assert all(b - a >= BATCH_HEARTBEAT_S for a, b in zip(beats, beats[1:]))
