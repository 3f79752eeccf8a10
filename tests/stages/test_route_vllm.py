"""Routing against two real vLLM servers (small and large: the tiny local model under two served names).

Slow: the session's two servers (tests/conftest.py ``vllm_pair``: the tiny model, both started at once, minutes on 2
cores; tests/generate/test_vllm_server.py uses the large one after this file). Checks that
each query goes where the router says, that the ledger's per-route tokens and $ equal what each
server counted (its own Prometheus counters), and that killing the small server escalates its
queries to the large one with the failed attempts priced.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ragcost.cost.compute import stage_row
from ragcost.cost.ledger import Ledger
from ragcost.cost.report import build_report
from ragcost.records import Hit, QueryState
from ragcost.runtime.runner import Runner
from ragcost.stages.base import stage_registry

pytestmark = pytest.mark.slow

BOOK = """\
version: "route-vllm.1"
as_of: 2026-12-01
queries_per_month: 1000
resources:
  cpu: {kind: time, usd_per_hour: 0.36, source: test}
  small-llm: {kind: tokens, input_per_1m: 0.15, output_per_1m: 0.60, source: test}
  large-llm: {kind: tokens, input_per_1m: 2.50, output_per_1m: 10.00, source: test}
"""
HITS = [Hit(1, "d1", 0.9, "Tuples", "A tuple is an immutable sequence of values."),
        Hit(2, "d2", 0.7, "Lists", "A list is a mutable sequence; append adds an item.")]
SIMPLE = ["what is a tuple", "what does append do", "what is a list"]
COMPLEX = ["compare tuples and lists and explain when each is better", "explain why lists are not hashable"]


def stages(ctx, servers):
    common = {"backend": "vllm", "max_tokens": 8, "context_tokens": 60, "tokenizer": str(servers.model),
              "extra_body": {"ignore_eos": True}, "timeout_s": 120, "read_timeout_s": 60, "connect_timeout_s": 2,
              "retry": {"attempts": 1}}
    specs = [("route", {"router": "rules", "default": "small",
                        "rules": [{"target": "large", "regex": r"\b(compare|explain)\b"}]}),
             ("generate", {"target": "small", **common, "base_url": servers.small.base_url, "model": "small",
                           "resource": "small-llm", "escalate_to": "large"}),
             ("generate", {"target": "large", **common, "base_url": servers.large.base_url, "model": "large",
                           "resource": "large-llm"})]
    out = []
    for type_, params in specs:
        cls = stage_registry.get(type_)
        st = cls(cls.Params(**params), ctx)
        st.warm_up()
        out.append(st)
    return out


def run_and_record(sts, ctx, ledger, run_id, texts):
    batch = [QueryState(text=t, id=f"q{i}", hits=list(HITS)) for i, t in enumerate(texts)]
    res = Runner(sts, ctx.price_book).run(batch)
    for s in batch:
        rows = [stage_row(c.record, ctx.price_book, c.call_id) for c in res.calls if c.serves(s)]
        ledger.record_query(run_id, {"text": s.text, "ok": s.ok, "outcome": s.outcome, **s.route_fields()}, rows)
    return batch, res


def test_routes_ledger_tokens_match_the_servers_and_a_dead_small_server_escalates(vllm_pair, tmp_path):
    servers = vllm_pair
    from ragcost.cost.pricebook import load_price_book

    (tmp_path / "book.yaml").write_text(BOOK)
    ctx = SimpleNamespace(resource="cpu", price_book=load_price_book(tmp_path / "book.yaml"), path=tmp_path / "p.yaml", base=tmp_path)
    sts = stages(ctx, servers)
    url = f"duckdb:///{tmp_path / 'ledger.duckdb'}"
    before = {n: getattr(servers, n).tokens() for n in ("small", "large")}

    with Ledger(url) as led:
        run_id = led.start_run("query", "routed", "route-vllm.1")
        batch, res = run_and_record(sts, ctx, led, run_id, SIMPLE + COMPLEX)
    # 1. Each query went where the router said, and only there.
    for s in batch:
        want = s.decision["target"]
        assert s.ok and s.routes == [want], (s.text, s.routes, s.error)
        ends = {c.record.notes["endpoint"] for c in res.calls_for(s) if c.record.stage.startswith("generate:") and "endpoint" in c.record.notes}
        assert ends == {f"{getattr(servers, want).base_url} model={want}"}, (s.text, ends)
    assert [s.route for s in batch] == ["small"] * 3 + ["large"] * 2

    # 2. The ledger's per-route tokens and $ equal what each server counted.
    after = {n: getattr(servers, n).tokens() for n in ("small", "large")}
    routes = {r.route: r for r in build_report(url).routes}
    assert set(routes) == {"small", "large"}
    book = ctx.price_book
    for name, resource in (("small", "small-llm"), ("large", "large-llm")):
        got = routes[name].by_resource[resource]
        prompt, gen = (a - b for a, b in zip(after[name], before[name]))
        assert (got["input_tokens"], got["output_tokens"]) == (prompt, gen), (name, got, prompt, gen)
        print(f"route {name}: ledger {got['input_tokens']:.0f}/{got['output_tokens']:.0f} tokens ${got['usd']:.8f}; "
              f"server counted {prompt:.0f}/{gen:.0f}")
        r = book.resources[resource]
        assert got["usd"] == pytest.approx((prompt * r.input_per_1m + gen * r.output_per_1m) / 1e6)

    # 3. The small server dies: its queries escalate to the large one, and both attempts are on the bill.
    servers.small.kill()
    large_before = servers.large.tokens()
    with Ledger(url) as led:
        run_id = led.start_run("query", "routed", "route-vllm.1")
        batch, res = run_and_record(sts, ctx, led, run_id, ["what is a set", "what does pop do"])
    for s in batch:
        assert s.ok and s.routes == ["small", "large"] and s.answer, (s.routes, s.error)
        failed = [c for c in res.calls_for(s) if c.record.stage == "generate:small"]
        assert failed and all(c.record.failures == 1 and c.record.notes["ok"] is False for c in failed)
    routes = {r.route: r for r in build_report(url).routes}
    esc = routes["small>large"]
    assert esc.queries == 2 and esc.escalated == 2 and esc.successful == 2
    prompt, gen = (a - b for a, b in zip(servers.large.tokens(), large_before))
    assert (esc.by_resource["large-llm"]["input_tokens"], esc.by_resource["large-llm"]["output_tokens"]) == (prompt, gen)
    assert "small-llm" in esc.by_resource  # the refused attempts are recorded (and priced by what they used)
    assert esc.usd_per_successful == pytest.approx(esc.usd / 2)
    print(f"escalated small>large: {esc.queries} queries, ${esc.usd:.8f} (${esc.usd_per_successful:.8f} per success), "
          f"resources {sorted(esc.by_resource)}; large server counted {prompt:.0f}/{gen:.0f}")
