"""`ragcost serve` as a process: --workers refuses DuckDB; SIGTERM drains; kill -9 leaves only whole queries."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ragcost.cli.main import main
from tests.serve.conftest import free_port, ledger_rows, variant

ACME = {"authorization": "Bearer key-acme"}
REPO = Path(__file__).resolve().parents[2]


def test_more_than_one_worker_on_duckdb_is_refused_in_one_line(kb_served, capsys):
    assert main(["serve", str(kb_served), "--workers", "2"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs a PostgreSQL ledger" in err and "--workers 1" in err


class Served:
    def __init__(self, pipeline: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, "-m", "ragcost.cli.main", "serve", str(pipeline), "--port", str(self.port),
                                      "--log-level", "warning"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.proc.kill()
        raise RuntimeError(self.proc.stdout.read().decode()[-2000:])


async def _admitted(c: httpx.AsyncClient) -> float:
    """The server's ``ragcost_in_flight`` gauge: requests admitted and not yet answered."""
    r = await c.get("/metrics")
    for line in r.text.splitlines():
        if line.startswith("ragcost_in_flight"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _load(url: str, n: int, after_s: float, act) -> list:
    """``n`` concurrent queries; ``act`` once ``after_s`` has passed and the server has admitted some of them
    (on a loaded machine none may have arrived after a fixed delay: the act would then be before the load)."""
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=n)) as c, \
            httpx.AsyncClient(base_url=url, timeout=10) as probe:
        async def one(i):
            try:
                return await c.post("/v1/query", headers=ACME, json={"text": f"refund {i}"})
            except httpx.HTTPError as e:
                return e
        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        await asyncio.sleep(after_s)
        end = time.monotonic() + 30
        while await _admitted(probe) < 1 and time.monotonic() < end and not all(t.done() for t in tasks):
            await asyncio.sleep(0.02)
        act()
        return await asyncio.gather(*tasks)


@pytest.mark.slow
def test_sigterm_during_load_finishes_every_accepted_request_and_exits_0(kb_served):
    slow = variant(kb_served, "drain.yaml", serve={"batch_window_ms": 400, "max_batch": 256, "keys": "file:keys.json"})
    t0 = time.time()
    s = Served(slow)
    rs = asyncio.run(_load(s.url, 80, 0.2, lambda: s.proc.send_signal(signal.SIGTERM)))
    assert s.proc.wait(60) == 0
    wall = time.time() - t0
    ok = [r for r in rs if isinstance(r, httpx.Response)]
    assert ok and all(r.status_code == 200 for r in ok), [r.status_code for r in ok if r.status_code != 200]
    qrows, _ = ledger_rows(slow)
    assert {r.json()["id"] for r in ok} <= {q["query_id"] for q in qrows}
    # its provisioned time is the process's life, start-up (imports, loading, warm-up) and shutdown as phases
    from ragcost.cost.ledger import Ledger
    from ragcost.runtime.pipeline import Pipeline

    with Ledger(Pipeline.load(slow).config.store_url, read_only=True) as led:
        [life] = [x for x in led.read_lifetimes() if x["kind"] == "serve"]
    held = (life["stopped_at"] - life["started_at"]).total_seconds()
    assert life["started_at"] < life["ready_at"] < life["stopping_at"] <= life["stopped_at"]
    assert abs(held - wall) <= 0.02 * wall + 0.1, (held, wall)  # the outside clock also waited for /readyz polls


@pytest.mark.slow
def test_kill_9_during_load_leaves_only_whole_queries(kb_served):
    s = Served(variant(kb_served, "kill.yaml"))
    rs = asyncio.run(_load(s.url, 150, 0.8, lambda: s.proc.send_signal(signal.SIGKILL)))
    s.proc.wait(30)
    done = {r.json()["id"] for r in rs if isinstance(r, httpx.Response) and r.status_code == 200}
    qrows, srows = ledger_rows(kb_served)
    ids = {q["query_id"] for q in qrows}
    assert done <= ids  # no completed query lost
    by_q: dict = {}
    for r in srows:
        by_q.setdefault(r["query_id"], []).append(r)
    for q in qrows:  # no partial query: every stage row is there and they add up to the query's cost
        rows = by_q.get(q["query_id"], [])
        if q["error"] is None:
            assert {"embed", "retrieve", "generate", "storage"} <= {r["stage"] for r in rows}
        assert q["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in rows))


def test_serving_beyond_loopback_without_keys_is_refused_in_one_line(kb_served, capsys):
    open_ = variant(kb_served, "open.yaml", serve={})
    assert main(["serve", str(open_), "--host", "0.0.0.0"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "without serve.keys" in err and "--host 127.0.0.1" in err
