"""A batch `ragcost query --queries` process, measured from outside it: the ledger holds its whole life and CPU.

The CLI runs as a real subprocess; a wall clock around it and the kernel's CPU count of it (``wait4``) are the
truth. Its lifetime row spans process start to exit (start-up and shutdown as phases of their own), the bill's
fully loaded dollars are those hours at the book's rate plus storage, and the CPU the ledger charged is the
process's: its start-up and the tail after its last query are rows of the run, not left out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ragcost.cost.bill import build_bill
from ragcost.cost.ledger import Ledger
from ragcost.cost.pricebook import load_price_book
from tests.cli.conftest import REPO, run_cli, write_corpus, write_pipeline

# Alone, after the parallel part (scripts/test.sh): a busy neighbour worker slows the process's last steps (closing
# the ledger, exit) by ~0.1 s that no clock inside it can see, 1.1% of an 8 s run against the 1% bound (fc15, fc16);
# quiet it is 0.993 (bench.batch_process).
pytestmark = pytest.mark.serial
# What no clock inside the process can see is a fixed tail after its last stamp: the stamp's commit, the ledger's
# close and the kernel tearing the process down, 0.053-0.058 s here quiet (0.063-0.073 s before the rows' checkpoint
# moved ahead of the stamp) and 0.135 s on CI's slower machine, 1.15% of its 11.7 s run of 55 queries (stop 50). The
# claim is about a batch job's hours: a run long enough that start-up is not most of it. At 550 queries a quiet
# fresh clone (fc47) ran 5.8 s, and its fixed 0.061 s tail was 1.05%: the kernel's teardown of a process that has
# torch loaded alone is 0.067-0.078 s after os._exit (measured with a bare child that imports sentence-transformers).
# 1,250 queries keep the run at 10 s or more here, the regime of the claim; a shorter batch is off by that tail.
REPEAT = 250

QUERIES = ["how do I get a refund", "reset my password", "export my data", "webhook signature", "billing cycle"]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    from ragcost.cli.main import main

    folder = tmp_path_factory.mktemp("batch")
    write_corpus(folder / "kb.jsonl")
    pipe = write_pipeline(folder)
    assert main(["index", str(pipe)]) == 0
    qfile = folder / "q.jsonl"
    qfile.write_text("".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(QUERIES * REPEAT)))  # 1,250
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "ragcost.cli.main", "query", str(pipe), "--queries", str(qfile),
                             "--json"], env=env, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err.decode()
    led = Ledger(f"duckdb:///{folder / 'kb.duckdb'}")
    try:
        (run,) = [r for r in led.list_runs() if r["kind"] == "query"]
        lives = [x for x in led.read_lifetimes() if x["run_id"] == run["run_id"]]
        qrows, srows = led.read(pipeline="kb")
    finally:
        led.close()
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "lives": lives, "qrows": qrows, "srows": srows,
            "json": json.loads(out), "pipe": pipe}


def test_the_lifetime_spans_the_process_from_start_to_exit_within_1pct_of_an_outside_clock(batch):
    (life,) = batch["lives"]
    held = (life["stopped_at"] - life["started_at"]).total_seconds()
    print(f"lifetime {held:.3f} s, wall clock outside the process {batch['wall']:.3f} s")
    assert abs(held - batch["wall"]) <= 0.01 * batch["wall"]
    # the phases: loading, then the queries, then the output and exit
    assert life["started_at"] < life["ready_at"] < life["stopping_at"] < life["stopped_at"]
    # start-up holds the imports and the model's loading: 2.6 s of a 9.1 s run in a quiet fresh clone (fc48), so at
    # least a second on any machine here, and the queries come after it
    assert (life["ready_at"] - life["started_at"]).total_seconds() > 1.0


def test_fully_loaded_is_the_processs_hours_at_the_books_rate_plus_storage_and_start_up_is_its_own_line(batch, capsys):
    book = load_price_book(REPO / "pricing" / "default.yaml")
    bill = build_bill(batch["qrows"], batch["srows"], batch["lives"], book)
    cpu = next(r for r in bill.resources if r.resource == "cpu")
    storage = next(r for r in bill.resources if r.resource == "storage")
    rate = book.resources["cpu"].usd_per_hour
    assert cpu.usd_fully_loaded == pytest.approx(batch["wall"] / 3600 * rate, rel=0.01)
    assert bill.usd_fully_loaded == pytest.approx(cpu.provisioned_hours * rate + storage.usd_fully_loaded, rel=1e-9)
    assert bill.startup_hours is not None and bill.shutdown_hours is not None
    code, out, err = run_cli(capsys, "report", batch["pipe"])
    assert code == 0, err
    assert "start-up (process start to loading done): " in out and "shutdown (last query done to process exit): " in out


def test_every_cpu_second_of_the_process_is_charged_start_up_and_tail_included(batch):
    calls = {}
    for r in batch["srows"]:
        if r["cpu_seconds"] is not None:
            calls[r["call_id"]] = r["cpu_seconds"]
    charged = sum(calls.values())
    stages = {r["stage"] for r in batch["srows"]}
    print(f"charged CPU {charged:.3f} s, the process's (wait4) {batch['cpu']:.3f} s: ratio {charged / batch['cpu']:.4f}")
    assert {"start-up", "overhead"} <= stages
    assert 0.97 <= charged / batch["cpu"] <= 1.03
    # the queries' cost_usd is still the sum of their rows, the start-up and tail shares included
    by_query: dict[str, float] = {}
    for r in batch["srows"]:
        by_query[r["query_id"]] = by_query.get(r["query_id"], 0.0) + r["cost_usd"]
    for q in batch["qrows"]:
        assert q["cost_usd"] == pytest.approx(by_query[q["query_id"]], rel=1e-9)
