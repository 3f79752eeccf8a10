"""`ragcost serve --workers 2` on PostgreSQL: two processes serve, one ledger holds every query whole."""

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
from tests.serve.conftest import free_port, ledger_rows, make_pipeline, variant

ACME = {"authorization": "Bearer key-acme"}
REPO = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return kids


async def _queries(url: str, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        return await asyncio.gather(*(c.post("/v1/query", headers=ACME, json={"text": f"refund policy {i}"}) for i in range(n)))


@pytest.mark.slow
def test_two_workers_on_postgresql_serve_every_request_into_one_ledger(tmp_path, postgres_url):
    base = make_pipeline(tmp_path, keys=True)
    pg = variant(base, "pg.yaml", store=postgres_url)
    assert main(["index", str(pg)]) == 0
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "ragcost.cli.main", "serve", str(pg), "--port", str(port), "--workers", "2",
                             "--log-level", "warning"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 240
        while time.monotonic() < end:
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200 and len(_children(proc.pid)) >= 2:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        else:
            raise AssertionError(f"server not ready: {proc.stdout.read(4000).decode() if proc.poll() is not None else 'still starting'}")
        workers = _children(proc.pid)
        assert len(workers) >= 2, f"uvicorn started {len(workers)} worker process(es)"
        rs = asyncio.run(_queries(url, 40))
        codes = [r.status_code for r in rs]
        assert set(codes) <= {200, 429} and codes.count(200) >= 20, codes  # a full queue answers 429, never an error
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    qrows, srows = ledger_rows(pg)
    ids = {r.json()["id"] for r in rs if r.status_code == 200}
    assert ids <= {q["query_id"] for q in qrows}, "a served query is missing from the ledger"
    for q in qrows:
        rows = [r for r in srows if r["query_id"] == q["query_id"]]
        assert {"embed", "retrieve", "generate", "storage"} <= {r["stage"] for r in rows}
        assert q["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in rows)) and q["tenant"] == "acme"
