"""`ragcost report` splits calls, tokens, $ and latency by route; an escalation is a path of its own."""

from __future__ import annotations

import json

from ragcost.cost.report import aggregate
from tests.cli.conftest import run_cli, write_corpus, write_pipeline

LABELLED = [("how do I reset my password", "small"), ("where are invoices", "small"), ("what are the api rate limits", "small"),
            ("compare cancelling a subscription with asking for a refund and explain which costs less", "large"),
            ("explain how webhooks and rate limits interact when many orders change at once", "large")]


def test_report_splits_calls_tokens_dollars_and_p95_by_route(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    (tmp_path / "labelled.jsonl").write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in LABELLED))
    book = tmp_path / "book.yaml"
    book.write_text(
        'version: "route-test.1"\nas_of: 2026-12-01\nqueries_per_month: 1000\nresources:\n'
        '  cpu: {kind: time, usd_per_hour: 0.36, source: test}\n'
        '  small-llm: {kind: tokens, input_per_1m: 0.1, output_per_1m: 0.2, source: test}\n'
        '  large-llm: {kind: tokens, input_per_1m: 3.0, output_per_1m: 15.0, source: test}\n'
        '  storage: {kind: storage, ram_usd_per_gb_month: 2.0, disk_usd_per_gb_month: 0.1, source: test}\n')
    dead = {"backend": "vllm", "base_url": "http://127.0.0.1:9/v1", "model": "m", "connect_timeout_s": 0.5, "retry": {"attempts": 1}}
    p = write_pipeline(tmp_path, pricing=str(book), stages=[
        {"type": "retrieve", "k": 3},
        {"type": "route", "router": "knn", "default": "large", "examples": "labelled.jsonl", "k": 3, "threshold": 0.5},
        {"type": "generate", "target": "small", "resource": "small-llm", **dead, "escalate_to": "large"},
        {"type": "generate", "target": "large", "backend": "extractive", "resource": "large-llm"}])
    queries = tmp_path / "q.txt"
    queries.write_text("how do I reset a password\ncompare a refund with cancelling and explain which is cheaper\n")
    assert run_cli(capsys, "index", p)[0] == 0
    code, out, err = run_cli(capsys, "query", p, "--queries", queries, "--json")
    assert code == 0, err
    code, out, err = run_cli(capsys, "query", p, "how do I reset a password")
    assert code == 0 and "route: small>large (knn score" in out and "escalated small>large" in out, out
    code, out, err = run_cli(capsys, "report", p, "--json")
    assert code == 0, err
    routes = {r["route"]: r for r in json.loads(out)["routes"]}
    # The small server is down: its query escalated (a path of its own), the other went large directly.
    assert set(routes) == {"large", "small>large"}, routes
    esc = routes["small>large"]
    assert esc["queries"] == 2 and esc["escalated"] == 2 and esc["successful"] == 2
    assert set(esc["by_resource"]) >= {"small-llm", "large-llm"}  # the failed small attempt is on the bill too
    assert esc["p95_s"] > 0 and esc["calls"] > routes["large"]["calls"]
    assert sum(r["usd"] for r in routes.values()) <= json.loads(out)["totals"]["usd"] + 1e-12
    code, out, _ = run_cli(capsys, "report", p)
    assert "by route" in out and "small>large" in out


def test_no_routes_section_without_a_route_stage():
    q = {"query_id": "a", "ok": True, "useful": 0, "retrieved": 0, "route": None}
    row = {"query_id": "a", "stage": "retrieve", "resource": "cpu", "items": 1, "calls": 1, "cost_usd": 0.1,
           "wall_seconds": 0.01, "call_id": "c"}
    assert aggregate([q], [row]).routes == []
