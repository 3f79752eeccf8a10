"""Metrics you can alert on: every status of every route counted, tenant/route/outcome labels,
cost per tenant, /metrics behind a key, and a Grafana dashboard over exactly these metrics."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.serve.conftest import ServerThread, ledger_rows, variant

ACME = {"authorization": "Bearer key-acme"}
GLOBEX = {"authorization": "Bearer key-globex"}
REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "grafana" / "ragcost-serve.json"
CHAT = {"model": "kb", "messages": [{"role": "user", "content": "how do I get a refund?"}]}


@pytest.fixture(scope="module")
def metered(kb_served):
    (kb_served.parent / "metrics.token").write_text("scrape-token\n", encoding="utf-8")
    p = variant(kb_served, "metered.yaml", serve={"batch_window_ms": 5, "keys": "file:keys.json", "metrics_key": "file:metrics.token"})
    with ServerThread(p) as s:
        yield s, p


@pytest.fixture(scope="module")
def slow(kb_served):
    """One request at a time, a word every 50 ms, a 1 s deadline: for 429, 504 and 499."""
    p = variant(kb_served, "metered-slow.yaml", stages=[{"type": "retrieve", "k": 3}, {"type": "generate", "backend": "slow-words"}],
                serve={"batch_window_ms": 0, "max_queue": 1, "deadline_s": 1, "admission": "queue", "keys": "file:keys.json"})
    with ServerThread(p) as s:
        yield s


def _samples(text: str, name: str) -> list[dict]:
    return [dict(s.labels, value=s.value) for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name]


def _scrape(s) -> str:
    r = httpx.get(s.url + "/metrics", headers={"authorization": "Bearer scrape-token"})
    assert r.status_code == 200
    return r.text


async def _burst(url: str, n: int) -> list[int]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        rs = await asyncio.gather(*(c.post("/v1/query", headers=ACME, json={"text": f"refund {i}"}) for i in range(n)))
    return [r.status_code for r in rs]


def _idle(url: str, within_s: float = 30) -> None:
    """Wait until nothing is queued or running (the batches of abandoned requests run to their end)."""
    import time

    end = time.monotonic() + within_s
    while time.monotonic() < end:
        text = httpx.get(url + "/metrics").text
        if all(x["value"] == 0 for x in _samples(text, "ragcost_in_flight")):
            return
        time.sleep(0.1)
    raise AssertionError("the server never went idle")


class TestEveryStatusCounted:
    def test_one_request_of_each_route_and_status_is_counted_once(self, metered):
        s, _ = metered
        sent = [  # (route, status, how)
            ("/v1/query", 200, lambda: httpx.post(s.url + "/v1/query", headers=ACME, json={"text": "refund"})),
            ("/v1/query", 400, lambda: httpx.post(s.url + "/v1/query", headers=ACME, json={"text": " "})),
            ("/v1/query", 401, lambda: httpx.post(s.url + "/v1/query", json={"text": "refund"})),
            ("/v1/query", 413, lambda: httpx.post(s.url + "/v1/query", headers=ACME, content=b"x" * 70_000)),
            ("/v1/chat/completions", 200, lambda: httpx.post(s.url + "/v1/chat/completions", headers=ACME, json=CHAT)),
            ("/v1/chat/completions", 400, lambda: httpx.post(s.url + "/v1/chat/completions", headers=ACME, json={**CHAT, "n": 3})),
            ("/v1/chat/completions", 401, lambda: httpx.post(s.url + "/v1/chat/completions", json=CHAT)),
            ("/v1/chat/completions", 404, lambda: httpx.post(s.url + "/v1/chat/completions", headers=ACME, json={**CHAT, "model": "x"})),
            ("/v1/models", 200, lambda: httpx.get(s.url + "/v1/models", headers=ACME)),
            ("/v1/models", 401, lambda: httpx.get(s.url + "/v1/models")),
            ("/healthz", 200, lambda: httpx.get(s.url + "/healthz")),
            ("/readyz", 200, lambda: httpx.get(s.url + "/readyz")),
            ("/metrics", 401, lambda: httpx.get(s.url + "/metrics", headers={"authorization": "Bearer wrong"})),
            ("other", 404, lambda: httpx.get(s.url + "/nothing/here")),
            ("/v1/query", 405, lambda: httpx.get(s.url + "/v1/query")),
        ]
        before = _samples(_scrape(s), "ragcost_requests_total")
        for route, status, how in sent:
            assert how().status_code == status, (route, status)
        after = _samples(_scrape(s), "ragcost_requests_total")

        def count(samples, route, status):
            return sum(x["value"] for x in samples if x["route"] == route and x["status"] == str(status))

        for route, status, _ in sent:
            assert count(after, route, status) - count(before, route, status) == 1, (route, status)
        # the scrapes themselves: /metrics 200, counted too
        assert count(after, "/metrics", 200) >= 1

    def test_429_504_and_499_are_counted(self, slow):
        codes = asyncio.run(_burst(slow.url, 8))
        assert 429 in codes
        _idle(slow.url)
        r = httpx.post(slow.url + "/v1/query", headers=ACME, json={"text": "refund within 30 days " * 30}, timeout=30)
        assert r.status_code == 504
        _idle(slow.url)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(slow.url + "/v1/query", headers=ACME, json={"text": "refund within 30 days"}, timeout=0.3)
        _idle(slow.url)
        got = {(x["route"], x["status"], x["outcome"]) for x in _samples(httpx.get(slow.url + "/metrics").text, "ragcost_requests_total")}
        assert {("/v1/query", "429", "overloaded"), ("/v1/query", "504", "deadline"), ("/v1/query", "499", "disconnected")} <= got, got


class TestLabels:
    def test_tenant_and_outcome_labels_and_cost_per_tenant_equal_the_ledger(self, metered):
        s, p = metered
        for h in (ACME, GLOBEX, GLOBEX):
            assert httpx.post(s.url + "/v1/query", headers=h, json={"text": "api limits"}).status_code == 200
        text = _scrape(s)
        req = _samples(text, "ragcost_requests_total")
        assert {x["tenant"] for x in req} <= {"acme", "globex", "-", "other"}
        assert {x["outcome"] for x in req} <= {"ok", "blocked", "failed", "refused", "unauthorized", "overloaded", "deadline",
                                              "disconnected", "timeout", "unavailable", "error"}
        assert any(x["tenant"] == "globex" and x["outcome"] == "ok" for x in req)
        usd = {x["tenant"]: x["value"] for x in _samples(text, "ragcost_tenant_cost_usd_total")}
        qrows = [q for q in ledger_rows(p)[0] if q["run_id"] == s.service.session.run_id]  # this server's queries
        for tenant in ("acme", "globex"):
            assert usd[tenant] == pytest.approx(sum(q["cost_usd"] for q in qrows if q["tenant"] == tenant), rel=1e-9)

    def test_every_sample_carries_the_servers_replica_name_and_so_do_its_ledger_rows(self, metered):
        s, p = metered
        assert httpx.post(s.url + "/v1/query", headers=ACME, json={"text": "api limits"}).status_code == 200
        samples = [smp for fam in text_string_to_metric_families(_scrape(s)) for smp in fam.samples]
        assert samples and {smp.labels.get("replica") for smp in samples} == {s.service.replica}
        qrows = [q for q in ledger_rows(p)[0] if q["run_id"] == s.service.session.run_id]
        assert qrows and {q["replica"] for q in qrows} == {s.service.replica}

    def test_the_tenant_label_is_bounded_by_the_keys_file(self):
        from ragcost.serve.metrics import Metrics

        m = Metrics()
        m.known_tenants(["acme"])
        for i in range(50):
            m.request("/v1/query", 200, f"tenant-{i}", "ok")
        assert {x["tenant"] for x in _samples(m.render()[0].decode(), "ragcost_requests_total")} == {"other"}


class TestMetricsKey:
    @pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer wrong"}, {"authorization": "scrape-token"}])
    def test_metrics_behind_a_key_refuses_without_it(self, metered, headers):
        s, _ = metered
        r = httpx.get(s.url + "/metrics", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


class TestGrafanaDashboard:
    @pytest.fixture(scope="class")
    def dash(self):
        return json.loads(DASHBOARD.read_text(encoding="utf-8"))

    def test_it_has_the_fields_grafanas_dashboard_schema_requires(self, dash):
        assert isinstance(dash["title"], str) and dash["title"] and isinstance(dash["uid"], str) and len(dash["uid"]) <= 40
        assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
        assert set(dash["time"]) == {"from", "to"} and isinstance(dash["templating"]["list"], list)
        ids = [p["id"] for p in dash["panels"]]
        assert len(ids) == len(set(ids))
        for p in dash["panels"]:
            g = p["gridPos"]
            assert p["type"] in {"timeseries", "stat", "gauge", "table", "bargauge", "text"} and p["title"]
            assert all(isinstance(g[k], int) for k in ("h", "w", "x", "y")) and 0 < g["w"] and g["x"] + g["w"] <= 24
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)) and all(t["expr"] for t in p["targets"])

    def test_panels_do_not_overlap(self, dash):
        cells = set()
        for p in dash["panels"]:
            g = p["gridPos"]
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & mine, p["title"]
            cells |= mine

    def test_every_variable_used_is_defined(self, dash):
        defined = {v["name"] for v in dash["templating"]["list"]}
        used = set(re.findall(r"\$\{?(\w+)", json.dumps(dash["panels"])))
        assert used <= defined, used - defined

    def test_every_metric_it_queries_is_one_the_server_exports(self, dash, metered):
        s, _ = metered
        httpx.post(s.url + "/v1/query", headers=ACME, json={"text": "refund"})
        exported = {smp.name for fam in text_string_to_metric_families(_scrape(s)) for smp in fam.samples}
        exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
        exprs.append(next(v for v in dash["templating"]["list"] if v["name"] == "tenant")["definition"])
        used = {m for e in exprs for m in re.findall(r"\bragcost_[a-z_]+", e)}
        assert used and used <= exported, used - exported

    def test_every_query_can_be_narrowed_to_some_replicas_and_some_panels_split_by_replica(self, dash):
        for p in dash["panels"]:
            for t in p["targets"]:
                selectors = re.findall(r"\bragcost_[a-z_]+(\{[^}]*\})?", t["expr"])
                assert selectors and all('replica=~"$replica"' in sel for sel in selectors), (p["title"], t["expr"])
        split = [p["title"] for p in dash["panels"] if any("by (replica)" in t["expr"] or "by (le, replica)" in t["expr"]
                                                          for t in p["targets"])]
        assert len(split) >= 4, split
