"""The verdict: switch, keep or inconclusive for eval's pick against the pipeline as committed, in $ a month."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from ragcost.cli.main import main
from ragcost.evaluate.run import ConfigResult
from ragcost.evaluate.verdict import committed_of, decide, money
from tests.evaluate.conftest import REPO, write_beir, write_spec
from tests.evaluate.test_intervals import _many_queries

N = 300
FP_A = {"index": {"backend": "faiss", "kind": "flat", "build": {}, "search": {}}, "dim": 384, "precision": "float32",
        "scoring": [], "k": 10, "model": "m", "model_fingerprint": "x", "chunking": {}}
FP_B = {**FP_A, "dim": 192}


def _result(name, q, usd, useful, fp):
    r = ConfigResult(name, metrics={"ndcg@10": float(q.mean())}, p95_ms=1.0, bytes_per_vector=1.0,
                     useful=int(useful.sum()), total_usd=float(usd.sum()), queries=len(q))
    r.usd_per_useful = r.total_usd / r.useful
    r.per_query = {"ndcg@10": q, "usd": usd, "useful": useful}
    r.expected = {"fingerprint": fp}
    return r


def _run(committed, candidate, others=()):
    candidate.recommended = True
    results = [committed, candidate, *others] if candidate is not committed else [committed, *others]
    return SimpleNamespace(quality="ndcg@10", within_pct=2.0, spec_path="eval/x.yaml", query_ids=[f"q{i}" for i in range(N)],
                           ok=lambda: results)


def _pair(seed, gain=0.0, usd_ratio=1.0, usd=1e-5, noise=0.01):
    """committed and candidate on the same N questions: candidate's quality + gain, its $ x usd_ratio."""
    rng = np.random.default_rng(seed)
    base = rng.beta(1.2, 0.8, N)
    useful = rng.poisson(1.5, N).astype(float) + 1
    a = _result("flat d384", base, np.full(N, usd), useful, FP_A)
    b = _result("flat d192", np.clip(base + gain + rng.normal(0, noise, N), 0, 1), np.full(N, usd * usd_ratio), useful, FP_B)
    return a, b


class TestRule:
    def test_the_committed_pick_is_kept(self):
        a, _ = _pair(0)
        v = decide(_run(a, a), FP_A, 100_000, "declared")
        assert v.word == "keep" and "is eval's pick" in v.why and v.delta_usd_per_month == 0

    def test_significantly_better_quality_switches_and_says_what_it_costs(self):
        a, b = _pair(1, gain=0.05, usd_ratio=1.2)
        v = decide(_run(a, b), FP_A, 100_000, "declared")
        assert v.word == "switch" and "better" in v.why
        assert v.delta_usd_per_month == pytest.approx(0.2e-5 * 100_000) and "+$0.20 a month" in v.why

    def test_a_material_saving_with_no_quality_difference_switches(self):
        a, b = _pair(2, usd_ratio=0.5, usd=1e-3)  # $1e-3 a query, 100k a month: saves $50
        v = decide(_run(a, b), FP_A, 100_000, "declared", material=10)
        assert v.word == "switch" and "saves $50.00 a month" in v.why

    def test_an_immaterial_saving_is_kept_and_says_so_in_dollars(self):
        # the case: 8.9% per useful document, cents a month
        a, b = _pair(3, usd_ratio=0.911, usd=1.5e-7)
        v = decide(_run(a, b), FP_A, 100_000, "declared", material=10)
        assert v.word == "keep" and "immaterial" in v.why and "a month" in v.why
        assert abs(v.delta_usd_per_month) < 0.01

    def test_neither_quality_nor_dollars_distinguishable_is_inconclusive_with_the_questions_needed(self):
        a, b = _pair(4, gain=0.02, noise=0.3)  # a 0.02 gain (over the 2% the spec calls material) the noise hides
        v = decide(_run(a, b), FP_A, 100_000, "declared")
        assert v.word == "inconclusive" and v.questions_needed and v.questions_needed > N
        assert f"{v.questions_needed:,} judged questions" in v.why

    def test_an_immaterial_difference_either_way_is_kept_not_called_inconclusive(self):
        # SciFact's scifact-indexes run: flat d384 f32 (committed) -> hnsw-m16 d384 ef=96, one question of 300 apart
        a, b = _pair(10, gain=0.0, noise=0.0)
        b.per_query["ndcg@10"] = a.per_query["ndcg@10"].copy()
        b.per_query["ndcg@10"][0] += 0.12
        b.metrics["ndcg@10"] = float(b.per_query["ndcg@10"].mean())
        v = decide(_run(a, b), FP_A, 100_000, "declared")
        assert v.word == "keep" and "no material difference" in v.why and "1 of 300 questions" in v.why

    def test_dearer_beyond_the_noise_with_no_quality_gain_is_kept(self):
        a, b = _pair(11, gain=0.0, usd_ratio=1.3, noise=0.05)
        v = decide(_run(a, b), FP_A, 100_000, "declared")
        assert v.word == "keep" and "a month more" in v.why

    def test_a_significant_quality_loss_without_a_material_saving_is_kept(self):
        a, b = _pair(5, gain=-0.03, usd_ratio=1.0)
        v = decide(_run(a, b), FP_A, 100_000, "declared")
        assert v.word == "keep" and "worse" in v.why

    def test_the_same_quality_on_every_question_and_no_real_saving_is_kept(self):
        a, b = _pair(9)
        b.per_query["ndcg@10"] = a.per_query["ndcg@10"].copy()
        b.metrics["ndcg@10"] = a.metrics["ndcg@10"]
        v = decide(_run(a, b), FP_A, 100_000, "declared")
        assert v.word == "keep" and "same ndcg@10 on every question" in v.why

    def test_a_pipeline_outside_the_grid_is_named_not_guessed(self):
        a, b = _pair(6)
        other = {**FP_A, "dim": 128}
        v = decide(_run(a, b), other, 100_000, "declared")
        assert v.word == "inconclusive" and v.committed is None and "d128" in v.why and "eval/x.yaml" in v.why

    def test_too_few_questions_is_inconclusive(self):
        a, b = _pair(7, gain=0.1)
        run = _run(a, b)
        run.query_ids = run.query_ids[:5]
        v = decide(run, FP_A, 100_000, "declared")
        assert v.word == "inconclusive" and "too few" in v.why

    def test_money_keeps_cents_and_small_figures(self):
        assert money(0.02) == "+$0.02" and money(-1234.5) == "-$1,234.50" and money(-3.1e-5) == "-$3.1e-05"


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """The 32-question synthetic run over the committed configuration (the pipeline's default index, hnswlib m16 ef
    64, at the model's 64 dims) and one other: a verdict weighs eval's pick against the committed one, and each CLI
    run below measures its grid anew (2 configurations, not test_intervals' 6)."""
    from ragcost.evaluate.run import run_eval
    from ragcost.evaluate.spec import load_spec

    folder = tmp_path_factory.mktemp("verdict")
    write_beir(folder / "data" / "synth", n_docs=160)
    _many_queries(folder / "data" / "synth")
    grid = f"grid:\n  - index: {REPO}/indexes/flat.yaml\n  - index: {REPO}/indexes/hnsw-m16.yaml\n    sweep: {{ef: [64]}}"
    spec = write_spec(folder, grid, dims=[64], precisions=["float32"], k=[10])
    return folder, spec, run_eval(load_spec(spec), folder / "cache")


class TestOnARun:
    def test_the_committed_configuration_is_found_and_the_month_is_the_price_book_by_hand(self, evaluated):
        _, _, run = evaluated
        v = run.verdict
        # the synthetic pipeline runs the default index (hnswlib m16, ef 64) at the model's 64 dims, k 10
        assert v["committed"] == "hnsw-m16 d64 f32 ef=64" and v["word"] in ("switch", "keep", "inconclusive")
        book = yaml.safe_load((REPO / "pricing" / "default.yaml").read_text())
        by = {r.name: r for r in run.ok()}
        a, b = by[v["committed"]], by[v["candidate"]]
        # by hand: each configuration's dollars are its stages' (work + storage) over its queries
        per_q = [sum(s["usd"] for s in r.stages) / r.queries for r in (a, b)]
        assert v["queries_per_month"] == book["queries_per_month"]
        assert v["delta_usd_per_month"] == pytest.approx((per_q[1] - per_q[0]) * book["queries_per_month"], abs=1e-9)
        assert "declared in price book" in v["traffic_basis"]

    def test_cli_prints_the_verdict_in_the_terminal_json_and_html(self, evaluated, tmp_path, capsys):
        folder, spec, _ = evaluated
        args = ["eval", str(spec), "--no-ledger", "--cache-dir", str(folder / "cache")]
        assert main([*args, "--html", str(tmp_path / "r.html"), "--per-month", "2,000,000"]) == 0
        out = capsys.readouterr().out
        assert "verdict: " in out and "at 2,000,000 queries a month (given with --per-month" in out
        assert 'class="verdict"' in (tmp_path / "r.html").read_text()
        assert main([*args, "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["verdict"]["word"] in ("switch", "keep", "inconclusive") and d["verdict"]["line"].startswith("verdict: ")

    def test_observed_traffic_comes_from_the_ledgers_query_runs(self, evaluated, tmp_path, capsys):
        from datetime import timedelta

        from ragcost.cost.ledger import Ledger, utcnow

        folder, spec, _ = evaluated
        ledger = f"duckdb:///{tmp_path / 'l.duckdb'}"
        args = ["eval", str(spec), "--no-ledger", "--ledger", ledger, "--cache-dir", str(folder / "cache"), "--per-month", "observed"]
        assert main(args) == 1
        err = capsys.readouterr().err
        assert "no ledger at" in err and "Traceback" not in err
        with Ledger(ledger) as led:
            led.start_run("query", "another pipeline", "v")
        assert main(args) == 1
        err = capsys.readouterr().err
        assert "no query of pipeline 'synthetic'" in err and "Traceback" not in err
        with Ledger(ledger) as led:
            run_id = led.start_run("query", "synthetic", "v")
            t0 = utcnow() - timedelta(hours=73)
            led.record_queries(run_id, [({"at": t0 + timedelta(hours=i), "text": "q", "ok": True, "useful": 1}, [])
                                        for i in range(74)])  # 74 queries over 73 hours
        assert main(args) == 0
        out = capsys.readouterr().out
        assert f"at {round(74 * 730 / 73):,} queries a month (observed in the ledger: 74 queries over 73.0 h" in out

    def test_a_bad_per_month_is_one_line(self, evaluated, capsys):
        folder, spec, _ = evaluated
        assert main(["eval", str(spec), "--no-ledger", "--cache-dir", str(folder / "cache"), "--per-month", "lots"]) == 1
        err = capsys.readouterr().err
        assert "--per-month 'lots'" in err and "Traceback" not in err


def test_committed_of_matches_fingerprints_exactly():
    a, b = _pair(8)
    run = _run(a, b)
    assert committed_of(run, FP_B) is b and committed_of(run, {**FP_B, "k": 5}) is None
