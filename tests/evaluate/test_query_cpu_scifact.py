"""Eval's per-query embedding CPU on SciFact, against the same query measured alone.

Issue 40: eval gave each embedding batch's whole CPU to its first query (cpu: [0.49, 0, 0, ...]), so every
dollar interval and paired cost test was computed on figures no query paid. Here each query's figure is
compared with the world it describes: the query embedded alone through the embed stage and the runner, as
`ragcost query` runs one question (its median of several rounds).

- One at a time (eval's default traffic): each query's eval CPU within 25% of its own alone (median over
  queries of |eval / alone - 1|).
- In batches of 32 (``--traffic 32``): the per-query figures sum to their batch's measured CPU, and each
  query's part follows its work: eval / alone within 25% of the batch discount (median over queries).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragcost.evaluate.vectors import query_cpu
from tests.conftest import fastest_runtime
from tests.evaluate.conftest import REPO

N = 64
ALONE_ROUNDS = 5


@pytest.fixture(scope="module")
def scifact(tmp_path_factory, shared_data):
    """The SciFact pipeline (its store in a temporary folder: nothing here reads it), warm, and 64 queries."""
    from ragcost.runtime.pipeline import Pipeline

    folder = tmp_path_factory.mktemp("scifact-cpu")
    cfg = {"name": "scifact", "store": f"duckdb:///{folder / 'store.duckdb'}",
           "embed": {"model": "all-MiniLM-L6-v2", "batch_size": 64, **fastest_runtime()},
           "pricing": str(REPO / "pricing" / "default.yaml")}
    (folder / "pipe.yaml").write_text(json.dumps(cfg))
    pipe = Pipeline.load(folder / "pipe.yaml", judge=False)
    pipe.embedder.warm_up()
    rows = [json.loads(line) for line in (shared_data / "scifact" / "queries.jsonl").read_text().splitlines()[:N]]
    yield pipe, shared_data / "scifact", [r["_id"] for r in rows], [r["text"] for r in rows], folder
    pipe.close()


def _alone(pipe, ids: list[str], texts: list[str]) -> np.ndarray:
    """Each query's CPU seconds embedded by itself through the embed stage and the runner: median of whole rounds."""
    from ragcost.records import QueryState
    from ragcost.runtime.runner import Runner
    from ragcost.stages.embed import EmbedQueries

    runner = Runner([EmbedQueries(EmbedQueries.Params(), pipe)], pipe.price_book)
    out = np.zeros((ALONE_ROUNDS, len(ids)))
    for r in range(ALONE_ROUNDS):
        for i, (q, t) in enumerate(zip(ids, texts)):
            out[r, i] = runner.run([QueryState(text=t, id=q)]).calls[0].record.cpu_seconds
    return np.median(out, axis=0)


@pytest.fixture(scope="module")
def alone(scifact):
    pipe, _, ids, texts, _ = scifact
    return _alone(pipe, ids, texts)


def test_one_at_a_time_each_query_costs_what_it_costs_alone(scifact, alone):
    pipe, data, ids, texts, folder = scifact
    _, cpu = query_cpu(pipe, ids, texts, data, folder / "one", batch=1)
    ratio = cpu / alone
    off = float(np.median(np.abs(ratio - 1)))
    assert off <= 0.25, f"median |eval / alone - 1| = {off:.2f} (ratios p10 {np.percentile(ratio, 10):.2f}, p90 {np.percentile(ratio, 90):.2f})"


def test_in_batches_each_query_pays_its_work_and_the_parts_sum_to_the_batch(scifact, alone):
    pipe, data, ids, texts, folder = scifact
    _, cpu = query_cpu(pipe, ids, texts, data, folder / "batched", batch=32)
    entry = next(iter(json.loads(next((folder / "batched").glob("*.query-cpu.json")).read_text()).values()))
    assert [b["queries"] for b in entry["batches"]] == [32, 32]
    for b, lo in zip(entry["batches"], (0, 32)):
        assert cpu[lo:lo + 32].sum() == pytest.approx(b["cpu"], rel=1e-9)
    assert (cpu > 0).all()
    discount = cpu.sum() / alone.sum()  # what batching saves on the whole set
    assert discount < 1
    ratio = cpu / (alone * discount)
    off = float(np.median(np.abs(ratio - 1)))
    assert off <= 0.25, f"median |share / (alone x discount) - 1| = {off:.2f} (p10 {np.percentile(ratio, 10):.2f}, p90 {np.percentile(ratio, 90):.2f})"
