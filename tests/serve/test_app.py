"""The server over HTTP: OpenAI streaming with cost equal to the ledger, batching, 429, 413, 400, 401, tenants."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.serve.conftest import ServerThread, ledger_rows, make_pipeline

ACME = {"authorization": "Bearer key-acme"}


@pytest.fixture(scope="module")
def server(kb_served):
    with ServerThread(kb_served) as s:
        yield s


class TestChatCompletions:
    def test_the_openai_client_streams_an_answer_whose_cost_equals_the_ledger_rows(self, server, kb_served):
        from openai import OpenAI

        client = OpenAI(base_url=server.url + "/v1", api_key="key-acme")
        stream = client.chat.completions.create(model="kb", messages=[{"role": "user", "content": "how do I get a refund?"}],
                                                stream=True, stream_options={"include_usage": True})
        pieces, usage = [], None
        for ev in stream:
            if ev.choices:
                pieces.append(ev.choices[0].delta.content or "")
            if ev.usage is not None:
                usage = ev.usage
        assert "refund" in "".join(pieces).lower()
        extra = usage.model_extra
        qrows, srows = ledger_rows(kb_served)
        q = next(r for r in qrows if r["query_id"] == extra["query_id"])
        mine = [r for r in srows if r["query_id"] == q["query_id"]]
        assert q["tenant"] == "acme" and q["ok"] and q["error"] is None
        assert extra["cost_usd"] == pytest.approx(q["cost_usd"], rel=1e-12) and extra["cost_usd"] > 0
        assert extra["cost_by_stage"] == pytest.approx({r["stage"]: r["cost_usd"] for r in mine})

    def test_a_plain_completion_has_the_answer_and_the_cost(self, server):
        r = httpx.post(server.url + "/v1/chat/completions", headers=ACME,
                       json={"model": "kb", "messages": [{"role": "user", "content": "reset my password"}]})
        assert r.status_code == 200
        body = r.json()
        assert "password" in body["choices"][0]["message"]["content"].lower()
        assert body["usage"]["cost_usd"] == pytest.approx(body["ragcost"]["cost_usd"])


class TestQuery:
    def test_query_returns_hits_answer_stages_and_cost(self, server):
        r = httpx.post(server.url + "/v1/query", headers=ACME, json={"text": "invoice pdf", "k": 2})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["hits"] and body["answer"] and body["cost_usd"] > 0
        assert {s["stage"] for s in body["stages"]} >= {"embed", "retrieve", "generate", "storage"}

    def test_an_unknown_field_is_a_400_naming_it(self, server):
        r = httpx.post(server.url + "/v1/query", headers=ACME, json={"text": "x", "kk": 3})
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "kk: unknown field; remove it"

    def test_a_malformed_field_is_a_400_naming_it(self, server):
        r = httpx.post(server.url + "/v1/query", headers=ACME, json={"text": "x", "k": "many"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "k"

    def test_a_filter_on_an_unknown_field_is_a_400(self, server):
        r = httpx.post(server.url + "/v1/query", headers=ACME, json={"text": "x", "filter": {"colour": "red"}})
        assert r.status_code == 400 and "colour" in r.json()["error"]["message"]

    def test_a_body_over_the_limit_is_a_413(self, server):
        r = httpx.post(server.url + "/v1/query", headers=ACME, content=json.dumps({"text": "x" * 70_000}))
        assert r.status_code == 413 and "max_body_bytes" in r.json()["error"]["message"]


class TestKeys:
    @pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer wrong"}, {"authorization": "Basic key-acme"}])
    def test_a_missing_or_wrong_key_is_a_401(self, server, headers):
        r = httpx.post(server.url + "/v1/query", headers=headers, json={"text": "refund"})
        assert r.status_code == 401

    @pytest.mark.parametrize("asked", [None, {"tenant": "globex"}, {"$or": [{"tenant": "globex"}, {"tenant": "acme"}]},
                                       {"$not": {"tenant": "acme"}}])
    def test_tenant_a_never_sees_a_tenant_b_document_even_when_asking_for_it(self, server, asked):
        for text in ("webhooks and api rate limits", "two-factor login", "refund"):
            r = httpx.post(server.url + "/v1/query", headers=ACME, json={"text": text, "k": 12, "filter": asked})
            assert r.status_code == 200, r.text
            assert all(h["metadata"]["tenant"] == "acme" for h in r.json()["hits"])
        r = httpx.post(server.url + "/v1/query", headers={"authorization": "Bearer key-globex"}, json={"text": "webhooks", "k": 12})
        assert {h["metadata"]["tenant"] for h in r.json()["hits"]} == {"globex"}


class TestEndpoints:
    def test_health_ready_and_metrics(self, server):
        assert httpx.get(server.url + "/healthz").json() == {"ok": True}
        assert httpx.get(server.url + "/readyz").status_code == 200
        assert httpx.post(server.url + "/v1/query", headers=ACME, json={"text": "api"}).status_code == 200  # a stage's first sample
        text = httpx.get(server.url + "/metrics").text
        assert "ragcost_stage_seconds_bucket" in text and "ragcost_cost_usd_total" in text and "ragcost_queue_depth" in text


class TestReportByTenant:
    def test_report_tenant_splits_the_costs(self, server, kb_served, capsys):
        from ragcost.cli.main import main

        for key in ("key-acme", "key-globex", "key-globex"):
            assert httpx.post(server.url + "/v1/query", headers={"authorization": f"Bearer {key}"}, json={"text": "api"}).status_code == 200
        qrows, _ = ledger_rows(kb_served)
        totals = {}
        for t in ("acme", "globex"):
            assert main(["report", str(kb_served), "--tenant", t, "--json"]) == 0
            totals[t] = json.loads(capsys.readouterr().out)["totals"]
            mine = [q for q in qrows if q["tenant"] == t]
            assert totals[t]["queries"] == len(mine)
        assert main(["report", str(kb_served), "--json"]) == 0
        everything = json.loads(capsys.readouterr().out)["totals"]
        assert everything["queries"] == len(qrows) >= totals["acme"]["queries"] + totals["globex"]["queries"]


def test_warm_first_accepts_no_connection_before_warm_up_is_done(tmp_path):
    """What each of ``--workers N`` runs: a worker that takes a connection is warm, so a request
    never lands on a cold worker and gets 503 while a warm sibling says ready."""
    import time

    srv = ServerThread(make_pipeline(tmp_path), warm_first=True)
    srv.thread.start()
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                r = httpx.get(srv.url + "/readyz", timeout=2)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        else:
            raise AssertionError("server never accepted a connection")
        assert r.status_code == 200 and r.json() == {"ready": True}
    finally:
        srv.__exit__()
