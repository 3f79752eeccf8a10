"""`ragcost serve` records its provisioned time: a lifetime row from startup to shutdown, with heartbeats between."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.serve.conftest import ServerThread, make_pipeline

ACME = {"authorization": "Bearer key-acme"}


@pytest.mark.slow  # loads the model in a real uvicorn server
def test_a_served_run_records_its_lifetime_and_report_sets_it_beside_busy_time(tmp_path, monkeypatch):
    from ragcost.cost.bill import build_bill
    from ragcost.cost.ledger import Ledger
    from ragcost.runtime.pipeline import Pipeline

    monkeypatch.setenv("RAGCOST_HEARTBEAT_S", "0.2")
    kb = make_pipeline(tmp_path, keys=True)
    with ServerThread(kb) as server:
        for text in ("how do I get a refund?", "reset my password"):
            assert httpx.post(server.url + "/v1/query", headers=ACME, json={"text": text}).status_code == 200
        time.sleep(0.7)  # idle: provisioned, not busy
        url = Pipeline.load(kb).config.store_url
        with Ledger(url, read_only=True) as led:
            [live] = led.read_lifetimes()
        assert live["kind"] == "serve" and live["stopped_at"] is None and live["heartbeat_at"] > live["started_at"]
    pipe = Pipeline.load(kb)
    with Ledger(pipe.config.store_url, read_only=True) as led:
        [life] = led.read_lifetimes()
        qrows, srows = led.read()
    assert life["stopped_at"] is not None and life["stopped_at"] >= life["heartbeat_at"] >= life["started_at"]
    held_h = (life["stopped_at"] - life["started_at"]).total_seconds() / 3600
    bill = build_bill(qrows, srows, [life], pipe.price_book)
    cpu = next(r for r in bill.resources if r.resource == pipe.config.resource)
    res = pipe.price_book.resources[pipe.config.resource]
    assert cpu.provisioned_hours == pytest.approx(held_h, rel=1e-9)
    assert cpu.usd_fully_loaded == pytest.approx(held_h * res.usd_per_hour, rel=1e-9)
    assert 0 < cpu.utilization < 1 and cpu.usd_fully_loaded > cpu.usd_marginal
    assert "overhead" in {r["stage"] for r in srows}  # HTTP, parsing, ledger writes: charged, not dropped
