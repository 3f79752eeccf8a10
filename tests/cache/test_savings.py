"""The cache's value in ``ragcost report`` and ``ragcost cache stats``: hits by tier, the dollars each hit avoided
(its origin's ledger rows), the cache's own cost, the false hits' expected cost, and net."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from ragcost.cache.bound import wilson_interval
from ragcost.cache.savings import cache_summary
from tests.cache.conftest import CACHED
from tests.cli.conftest import REPO, run_cli, write_corpus, write_pipeline


def _q(qid, tier, **kw):
    return {"query_id": qid, "cache": json.dumps({"tier": tier, "stage": "cache", "write_stages": ["cache_write"], **kw})}


def _rows(qid, *stage_usd):
    return [{"query_id": qid, "stage": st, "cost_usd": usd, "seq": i} for i, (st, usd) in enumerate(stage_usd)]


MISS = (("embed", 1.0), ("cache", 0.1), ("retrieve", 2.0), ("generate", 10.0), ("cache_write", 0.2), ("overhead", 0.7),
        ("storage", 0.5), ("start-up", 0.3))
HIT = (("embed", 1.0), ("cache", 0.1), ("overhead", 0.7), ("storage", 0.5))


class TestSummary:
    def test_a_hit_avoids_what_its_origin_paid_in_the_stages_the_hit_did_not_run(self):
        qrows = [_q("m1", "miss"), _q("m2", "miss"), _q("h1", "exact", origin="m1"),
                 _q("h2", "semantic", verified=True, correct=True, origin="m2"), _q("h3", "exact", origin="m1"),
                 {"query_id": "other", "cache": None}]
        m2 = [(st, 3 * usd) for st, usd in MISS]
        srows = (_rows("m1", *MISS) + _rows("m2", *m2) + _rows("h1", *HIT) + _rows("h2", *HIT) + _rows("h3", *HIT)
                 + _rows("other", ("generate", 99.0)))
        c = cache_summary(qrows, srows)
        assert (c["lookups"], c["misses"]) == (5, 2)
        assert c["hits_by_tier"] == {"exact": 2, "semantic_verified": 1, "semantic_unverified": 0}
        # m1 twice, m2 once: retrieve + generate each; embed, overhead, storage, start-up every query pays
        assert c["avoided_by_stage"] == pytest.approx({"retrieve": 2 * 2.0 + 6.0, "generate": 2 * 10.0 + 30.0})
        assert c["avoided_usd"] == pytest.approx(12.0 + 12.0 + 36.0) and c["avoided_unknown"] == 0
        assert c["own_cost_by_stage"] == pytest.approx({"cache": 0.1 + 0.3 + 3 * 0.1, "cache_write": 0.2 + 0.6})
        assert c["own_cost_usd"] == pytest.approx(1.5)
        assert c["false_hit"]["expected_usd"] == 0.0  # no hit served unverified: nothing to price
        assert c["net_usd"] == pytest.approx(60.0 - 1.5) and c["verdict"] == "the cache avoids more than it costs"

    def test_an_origin_outside_the_selection_is_read_by_id_and_a_missing_one_is_unknown(self):
        qrows = [_q("h1", "exact", origin="old"), _q("h2", "exact", origin="gone"), _q("h3", "exact")]
        srows = _rows("h1", *HIT) + _rows("h2", *HIT) + _rows("h3", *HIT)
        asked = []

        def origin_rows(ids):
            asked.append(ids)
            return _rows("old", *MISS)

        c = cache_summary(qrows, srows, origin_rows)
        assert asked == [["gone", "old"]]  # one read for every origin outside the selection
        assert c["avoided_usd"] == pytest.approx(12.0) and (c["avoided_hits"], c["avoided_unknown"]) == (1, 2)
        assert "on the 1 hits whose origin the ledger holds" in c["verdict"]
        alone = cache_summary(qrows, srows)  # no ledger to read: every origin outside is unknown, never guessed
        assert alone["avoided_usd"] is None and alone["avoided_unknown"] == 3 and alone["net_usd"] is None
        assert "avoided unknown" in alone["verdict"]
        assert cache_summary([{"query_id": "x", "cache": None}], []) is None

    def test_a_cache_that_costs_more_than_it_avoids_says_so(self):
        qrows = [_q("m1", "miss"), _q("h1", "exact", origin="m1")]
        srows = _rows("m1", ("cache", 5.0), ("generate", 1.0), ("cache_write", 5.0)) + _rows("h1", ("cache", 5.0))
        c = cache_summary(qrows, srows)
        assert c["net_usd"] == pytest.approx(1.0 - 15.0) and "costs more than it avoids" in c["verdict"]

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
        assert fh["expected"] == pytest.approx(6 * 0.25) and fh["expected_interval_95"] == pytest.approx([6 * lo, 6 * hi])
        assert c["hits_by_tier"] == {"exact": 0, "semantic_verified": 3, "semantic_unverified": 6}
        assert (c["verifications"], c["verifications_wrong"]) == (5, 2)

    def test_the_false_hits_cost_is_their_expected_count_at_the_declared_price_of_a_wrong_answer(self):
        qrows = ([_q("m1", "miss")] + [_q(f"s{i}", "semantic", verified=False, origin="m1") for i in range(6)]
                 + [_q(f"ok{i}", "semantic", verified=True, sampled=True, correct=True, origin="m1") for i in range(3)]
                 + [_q("bad", "miss", verified=True, sampled=True, correct=False)])
        srows = _rows("m1", *MISS)
        lo, hi = wilson_interval(1, 4, 0.95)
        unpriced = cache_summary(qrows, srows)
        assert unpriced["false_hit"]["expected_usd"] is None and unpriced["false_hit"]["wrong_answer_usd"] is None
        base = 9 * 12.0 - unpriced["own_cost_usd"]
        assert unpriced["net_usd"] == pytest.approx(base) and unpriced["net_interval_95"] is None
        one, two = (cache_summary(qrows, srows, wrong_answer_usd=p)["false_hit"] for p in (2.0, 4.0))
        assert one["expected_usd"] == pytest.approx(1.5 * 2.0) and two["expected_usd"] == pytest.approx(2 * one["expected_usd"])
        assert two["expected_usd_interval_95"] == pytest.approx([2 * x for x in one["expected_usd_interval_95"]])
        assert one["expected_usd_interval_95"] == pytest.approx([6 * lo * 2.0, 6 * hi * 2.0])
        c = cache_summary(qrows, srows, wrong_answer_usd=4.0)
        assert c["net_usd"] == pytest.approx(base - 6.0)
        assert c["net_interval_95"] == pytest.approx([base - 6 * hi * 4.0, base - 6 * lo * 4.0])
        dear = cache_summary(qrows, srows, wrong_answer_usd=100.0)
        assert dear["net_interval_95"][0] < 0 < dear["net_interval_95"][1] and "spans zero" in dear["verdict"]

    def test_the_report_says_whether_false_hits_are_priced(self):
        from ragcost.cli.report import cache_lines

        qrows = ([_q("m1", "miss")] + [_q(f"s{i}", "semantic", verified=False, origin="m1") for i in range(6)]
                 + [_q("bad", "miss", verified=True, sampled=True, correct=False)])
        unpriced = "\n".join(cache_lines(cache_summary(qrows, _rows("m1", *MISS))))
        assert "false-hit cost: not priced (set wrong_answer_usd in the price book)" in unpriced
        assert "(false hits not counted)" in unpriced and "6 semantic unverified" in unpriced
        priced = "\n".join(cache_lines(cache_summary(qrows, _rows("m1", *MISS), wrong_answer_usd=2.0)))
        assert "false-hit cost $12.00" in priced and "6 expected false hits" in priced and "x $2.000 a wrong answer" in priced


SKIPPED = ("retrieve", "generate", "generate/overhead")  # what a hit does not run (the cache's own stages aside)


def _by_hand(kb_folder, hit_ids):
    """Each hit's origin (its ledger cache column), and the dollars of the origins' SKIPPED rows, by SQL."""
    import sqlalchemy as sa

    from ragcost.cost.ledger import Ledger

    with Ledger(f"duckdb:///{kb_folder / 'kb.duckdb'}", read_only=True) as led, led.engine.connect() as conn:
        cache = dict(conn.execute(sa.text("SELECT query_id, cache FROM rc_ledger_queries")).all())
        origins = [json.loads(cache[h])["origin"] for h in hit_ids]
        usd = [conn.execute(sa.text("SELECT sum(cost_usd) FROM rc_ledger_stage_calls WHERE query_id = :o AND stage IN "
                                    "('retrieve', 'generate', 'generate/overhead')"), {"o": o}).scalar() for o in origins]
    return origins, sum(usd)


def _asked(capsys, kb, *texts):
    for text in texts:
        code, _, err = run_cli(capsys, "query", kb, text)
        assert code == 0, err


def _report(capsys, *args):
    code, out, err = run_cli(capsys, "report", *args, "--json")
    assert code == 0, err
    return json.loads(out)["cache"]


def test_avoided_dollars_are_the_origins_ledger_dollars_and_an_origin_before_since_still_counts(tmp_path, capsys):
    from ragcost.cost.ledger import Ledger

    write_corpus(tmp_path / "kb.jsonl")
    kb = write_pipeline(tmp_path, stages=CACHED)
    assert run_cli(capsys, "index", kb)[0] == 0
    _asked(capsys, kb, "How do I reset my password?")
    since = datetime.now(timezone.utc).isoformat()
    _asked(capsys, kb, "How do I reset my password?", "How can I reset my password?", "Where do I download invoices?")
    with Ledger(f"duckdb:///{tmp_path / 'kb.duckdb'}", read_only=True) as led:
        qrows, srows = led.read()
    tiers = [json.loads(q["cache"])["tier"] for q in qrows]
    assert tiers == ["miss", "exact", "semantic", "miss"], tiers  # a repeat and a paraphrase of the first
    hits = [q["query_id"] for q in qrows[1:3]]
    origins, by_hand = _by_hand(tmp_path, hits)
    assert origins == [qrows[0]["query_id"]] * 2 and by_hand > 0
    assert {r["stage"] for r in srows if r["query_id"] in hits} & set(SKIPPED) == set()  # the hits ran none of them

    c = _report(capsys, kb)
    assert c["hits_by_tier"] == {"exact": 1, "semantic_verified": 1, "semantic_unverified": 0}
    assert c["avoided_usd"] == pytest.approx(by_hand, rel=1e-9, abs=0) and c["avoided_unknown"] == 0
    own = sum(r["cost_usd"] for r in srows if r["stage"] in ("cache", "cache_write"))
    assert c["own_cost_usd"] == pytest.approx(own, rel=1e-9) and c["net_usd"] == pytest.approx(by_hand - own, rel=1e-9)
    # the origin was asked before --since: read from the ledger by id, the same dollars
    later = _report(capsys, kb, "--since", since)
    assert later["lookups"] == 3 and later["avoided_usd"] == pytest.approx(by_hand, rel=1e-9, abs=0)

    code, out, _ = run_cli(capsys, "report", kb)
    assert "cache: 4 lookups, hit rate 50.0%: 1 exact, 1 semantic verified, 0 semantic unverified; 2 misses" in out
    assert "false-hit cost $0 (no hit served unverified)" in out and "cache net: net $" in out
    # `ragcost cache stats`: the same block over the ledger's whole window
    code, out, err = run_cli(capsys, "cache", "stats", kb)
    assert code == 0, err
    stats = json.loads(out)
    assert stats["value"] == c and stats["hits_by_tier"] == c["hits_by_tier"] and stats["hits"] == 2


def test_a_hit_whose_origin_is_not_in_the_ledger_is_counted_unknown(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    kb = write_pipeline(tmp_path, stages=CACHED)
    assert run_cli(capsys, "index", kb)[0] == 0
    code, _, err = run_cli(capsys, "query", kb, "What are the API rate limits?", "--no-ledger")  # the entry's origin
    assert code == 0, err
    _asked(capsys, kb, "What are the API rate limits?", "Where do I download invoices?")
    c = _report(capsys, kb)
    assert c["hits_by_tier"]["exact"] == 1 and (c["avoided_hits"], c["avoided_unknown"]) == (0, 1)
    assert c["avoided_usd"] is None and c["net_usd"] is None and "avoided unknown" in c["verdict"]
    code, out, _ = run_cli(capsys, "report", kb)
    assert "1 hits' avoided unknown (origin not in the ledger)" in out


def test_the_price_of_a_wrong_answer_is_a_price_book_field(tmp_path, capsys):
    from ragcost.cost.pricebook import load_price_book

    text = (REPO / "pricing" / "default.yaml").read_text()
    (tmp_path / "dear.yaml").write_text(text + "\nwrong_answer_usd: 2.5\n")
    assert load_price_book(tmp_path / "dear.yaml").wrong_answer_usd == 2.5
    assert load_price_book(REPO / "pricing" / "default.yaml").wrong_answer_usd is None  # not declared: not priced
    (tmp_path / "bad.yaml").write_text(text + "\nwrong_answer_usd: -1\n")
    code, _, err = run_cli(capsys, "validate", write_pipeline(tmp_path, pricing=str(tmp_path / "bad.yaml")))
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "bad.yaml:" in err and "wrong_answer_usd: Input should be greater than or equal to 0 (got -1)" in err
