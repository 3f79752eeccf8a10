"""The cache block of ``ragcost report``: hit rates, the false-hit estimate, saved, spent and net."""

from __future__ import annotations

import json

import pytest

from ragcost.cache.bound import wilson_interval
from ragcost.cache.savings import cache_summary
from tests.cache.conftest import CACHED
from tests.cli.conftest import run_cli, write_corpus, write_pipeline


def _q(qid, tier, **kw):
    return {"query_id": qid, "cache": json.dumps({"tier": tier, "stage": "cache", "write_stages": ["cache_write"], **kw})}


def _rows(qid, *stage_usd):
    return [{"query_id": qid, "stage": st, "cost_usd": usd, "seq": i} for i, (st, usd) in enumerate(stage_usd)]


class TestSummary:
    def test_saved_is_hits_times_the_misses_mean_cost_of_the_stages_a_hit_skips(self):
        qrows = [_q("m1", "miss"), _q("m2", "miss"), _q("h1", "exact"), _q("h2", "semantic", verified=True, correct=True),
                 {"query_id": "other", "cache": None}]
        srows = (_rows("m1", ("embed", 1.0), ("cache", 0.1), ("retrieve", 2.0), ("generate", 10.0), ("cache_write", 0.2), ("storage", 0.5))
                 + _rows("m2", ("embed", 1.0), ("cache", 0.1), ("retrieve", 4.0), ("generate", 30.0), ("cache_write", 0.2), ("storage", 0.5))
                 + _rows("h1", ("embed", 1.0), ("cache", 0.1), ("storage", 0.5))
                 + _rows("h2", ("embed", 1.0), ("cache", 0.3), ("storage", 0.5))
                 + _rows("other", ("generate", 99.0)))
        c = cache_summary(qrows, srows)
        assert (c["lookups"], c["exact_hits"], c["semantic_hits"], c["misses"]) == (4, 1, 1, 2)
        assert c["miss_cost_per_stage"] == pytest.approx({"retrieve": 3.0, "generate": 20.0})  # embed, storage: hits pay them too
        assert c["saved_usd"] == pytest.approx(2 * 23.0)
        assert c["spent_usd"] == pytest.approx(0.1 + 0.1 + 0.2 + 0.2 + 0.1 + 0.3)
        assert c["net_usd"] == pytest.approx(46.0 - 1.0) and c["verdict"] == "the cache saves more than it costs"

    def test_a_cache_that_costs_more_than_it_saves_says_so_and_no_misses_means_unknown(self):
        qrows = [_q("m1", "miss"), _q("h1", "exact")]
        srows = _rows("m1", ("cache", 5.0), ("generate", 1.0), ("cache_write", 5.0)) + _rows("h1", ("cache", 5.0))
        c = cache_summary(qrows, srows)
        assert c["net_usd"] == pytest.approx(1.0 - 15.0) and "costs more than it saves" in c["verdict"]
        only_hits = cache_summary([_q("h1", "exact")], _rows("h1", ("cache", 5.0)))
        assert only_hits["saved_usd"] is None and only_hits["net_usd"] is None and "unknown" in only_hits["verdict"]
        assert cache_summary([{"query_id": "x", "cache": None}], []) is None

    def test_false_hits_come_from_sampled_checks_only_and_scale_by_the_unverified_share(self):
        qrows = ([_q(f"s{i}", "semantic", verified=False) for i in range(6)]
                 + [_q(f"ok{i}", "semantic", verified=True, sampled=True, correct=True) for i in range(3)]
                 + [_q("bad", "miss", verified=True, sampled=True, correct=False)]
                 + [_q("thin", "miss", verified=True, sampled=False, correct=False)])  # thin evidence: not a sample
        c = cache_summary(qrows, [])
        fh = c["false_hit"]
        assert (fh["sampled_checks"], fh["wrong"]) == (4, 1) and fh["rate_unverified"] == pytest.approx(0.25)
        lo, hi = wilson_interval(1, 4, 0.95)
        assert fh["interval_95"] == pytest.approx([lo, hi]) and 0 < lo < 0.25 < hi < 1
        assert fh["served_rate"] == pytest.approx(0.25 * 6 / 9)  # 6 of 9 served hits were unverified
        assert (c["verifications"], c["verifications_wrong"]) == (5, 2)


def test_ragcost_report_shows_the_cache_block_and_its_dollars_reconcile_with_the_ledger(tmp_path, capsys):
    from ragcost.cost.ledger import Ledger

    write_corpus(tmp_path / "kb.jsonl")
    kb = write_pipeline(tmp_path, stages=CACHED)
    assert run_cli(capsys, "index", kb)[0] == 0
    for text in ["How do I reset my password?", "how do I reset my password", "Where do I download invoices?"]:
        code, _, err = run_cli(capsys, "query", kb, text)
        assert code == 0, err
    code, out, err = run_cli(capsys, "report", kb, "--json")
    assert code == 0, err
    c = json.loads(out)["cache"]
    assert (c["lookups"], c["exact_hits"] + c["semantic_hits"], c["misses"]) == (3, 1, 2)
    with Ledger(f"duckdb:///{tmp_path / 'kb.duckdb'}", read_only=True) as led:
        qrows, srows = led.read()
    misses = [q["query_id"] for q in qrows if json.loads(q["cache"])["tier"] == "miss"]
    assert {r["stage"] for r in srows if r["query_id"] in misses} == {
        "embed", "cache", "retrieve", "generate", "generate/overhead", "cache_write", "storage",
        "overhead"}  # the run's CPU outside stage calls, charged to its queries (docs/the-bill.md)
    skipped = ("retrieve", "generate", "generate/overhead")  # what a hit does not run
    by_hand = sum(r["cost_usd"] for r in srows if r["query_id"] in misses and r["stage"] in skipped) / 2
    assert by_hand > 0 and c["saved_usd"] == pytest.approx(by_hand)
    spent = sum(r["cost_usd"] for r in srows if r["stage"] in ("cache", "cache_write"))
    assert c["spent_usd"] == pytest.approx(spent) and c["net_usd"] == pytest.approx(by_hand - spent)
    code, out, _ = run_cli(capsys, "report", kb)
    assert "cache: 3 lookups, hit rate 33.3%" in out and "net $" in out
