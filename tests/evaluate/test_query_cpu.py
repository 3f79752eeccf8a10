"""Eval's query-embedding CPU: measured through the embed stage, reused only under the same conditions."""

from __future__ import annotations

import json

import numpy as np

from ragcost.evaluate.vectors import embed_queries
from ragcost.runtime.pipeline import Pipeline
from tests.evaluate.conftest import write_beir, write_spec

QUERIES = {f"q{i}": f"what about topic {i} and its data" for i in range(40)}


def _setup(tmp_path):
    data = write_beir(tmp_path / "data" / "synth")
    write_spec(tmp_path)
    return Pipeline.load(tmp_path / "pipe.yaml"), data


def test_a_measurement_is_reused_for_the_same_queries_and_conditions_only(tmp_path, monkeypatch):
    pipe, data = _setup(tmp_path)
    cache = tmp_path / "cache"
    calls = []
    real = pipe.embedder.embed
    monkeypatch.setattr(pipe.embedder, "embed", lambda texts: calls.append(len(texts)) or real(texts))
    first = embed_queries(pipe, QUERIES, data, cache)
    assert first.cpu is not None and (first.cpu > 0).all() and len(first.cpu) == 40
    # batches of embed.batch_size (16) through the embed stage, after one untimed batch
    path = next(cache.glob("*.query-cpu.json"))
    assert len(json.loads(path.read_text())) == 1
    n = len(calls)
    again = embed_queries(pipe, QUERIES, data, cache)
    assert len(calls) == n and np.array_equal(again.cpu, first.cpu)  # same queries, same conditions: reused
    half = dict(list(QUERIES.items())[:20])
    embed_queries(pipe, half, data, cache)  # another query set: measured for itself, not a share of the first
    assert len(calls) > n and len(json.loads(path.read_text())) == 2
    n = len(calls)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # another thread policy: never carried over
    embed_queries(pipe, QUERIES, data, cache)
    assert len(calls) > n and len(json.loads(path.read_text())) == 3


def test_a_damaged_measurement_file_is_measured_again(tmp_path):
    pipe, data = _setup(tmp_path)
    cache = tmp_path / "cache"
    embed_queries(pipe, QUERIES, data, cache)
    path = next(cache.glob("*.query-cpu.json"))
    path.write_text("{not json")
    qv = embed_queries(pipe, QUERIES, data, cache)
    assert (qv.cpu > 0).all() and len(json.loads(path.read_text())) == 1



def test_the_measurement_runs_rounds_until_they_span_the_set_time(tmp_path, monkeypatch):
    from ragcost.evaluate import vectors
    from ragcost.runtime.runner import Runner

    pipe, data = _setup(tmp_path)
    sizes: list[int] = []
    real = Runner.run
    monkeypatch.setattr(Runner, "run", lambda self, states, *a, **k: sizes.append(len(states)) or real(self, states, *a, **k))

    def rounds(span: float) -> int:
        """Timed rounds over the 40 queries (batches of 16: 3 stage calls a round) with MEASURE_SPAN_S = span."""
        sizes.clear()
        monkeypatch.setattr(vectors, "MEASURE_SPAN_S", span)
        _, cpu = vectors.query_cpu(pipe, list(QUERIES), list(QUERIES.values()), data, tmp_path / f"cache{span}")
        assert (cpu > 0).all() and sum(sizes) % len(QUERIES) == 0  # whole rounds only
        return sum(sizes) // len(QUERIES)

    # tiny batches: a round takes milliseconds, so the span runs the measurement to its cap
    assert rounds(60.0) == vectors.MEASURE_MAX_ROUNDS
    # no span: the minimum, an odd count so the median is a round
    assert rounds(0.0) == vectors.MEASURE_ROUNDS
    assert vectors.MEASURE_ROUNDS % 2 == 1 and vectors.MEASURE_MAX_ROUNDS % 2 == 1
