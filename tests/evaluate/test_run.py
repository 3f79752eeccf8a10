from __future__ import annotations

import csv
import math

import pytest

from ragcost.cli.main import main
from ragcost.evaluate.run import run_eval
from ragcost.evaluate.spec import load_spec
from tests.evaluate.conftest import REPO, write_beir, write_spec


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("eval")
    write_beir(folder / "data" / "synth", extra_qrels="q0\tghost-doc\t1\nq-missing\td1\t2\n")
    spec = write_spec(folder)
    run = run_eval(load_spec(spec), folder / "cache")
    return folder, spec, run


class TestRunEval:
    def test_flat_float32_has_ann_recall_one_and_every_config_reports_it(self, evaluated):
        _, _, run = evaluated
        by = {r.name: r for r in run.ok()}
        assert by["flat d64 f32"].metrics["ann_recall@10"] == 1.0
        assert by["flat d32 f32"].metrics["ann_recall@5"] == 1.0
        for r in run.ok():
            assert 0.0 <= r.metrics["ann_recall@10"] <= 1.0 and not math.isnan(r.metrics["ann_recall@5"])

    def test_every_config_has_quality_latency_bytes_and_dollars(self, evaluated):
        _, _, run = evaluated
        assert len(run.ok()) >= 10
        for r in run.ok():
            assert set(run.metric_names) <= set(r.metrics)
            assert 0 < r.p50_ms <= r.p95_ms <= r.p99_ms and r.qps_single > 0 and r.qps_batch > 0
            assert r.bytes_per_vector > 0 and r.index_bytes > 0 and r.total_usd > 0
            assert r.usd_per_useful == pytest.approx(r.total_usd / r.useful)

    def test_int8_and_lower_dims_take_fewer_bytes(self, evaluated):
        by = {r.name: r for r in evaluated[2].ok()}
        assert by["flat d64 int8"].bytes_per_vector < by["flat d64 f32"].bytes_per_vector / 2
        assert by["flat d32 f32"].bytes_per_vector < by["flat d64 f32"].bytes_per_vector

    def test_impossible_combinations_are_listed_not_crashed(self, evaluated):
        skipped = {r.name: r.reason for r in evaluated[2].results if r.status == "skipped"}
        assert "hnsw-m16 d64 int8" in skipped and "ivfpq-m24 d32 f32" in skipped

    def test_bad_qrels_rows_are_reported(self, evaluated):
        text = " ".join(evaluated[2].warnings)
        assert "q0->ghost-doc" in text and "q-missing" in text

    def test_front_and_one_recommendation_are_marked(self, evaluated):
        ok = evaluated[2].ok()
        assert any(r.pareto for r in ok) and sum(r.recommended for r in ok) == 1
        rec = next(r for r in ok if r.recommended)
        best = max(r.metrics["ndcg@10"] for r in ok)
        assert rec.pareto and rec.metrics["ndcg@10"] >= best * 0.98

    def test_a_second_run_reuses_the_cached_vectors(self, evaluated):
        folder, spec, run = evaluated
        assert run.embedded_documents == 96
        again = run_eval(load_spec(spec), folder / "cache")
        assert again.embedded_documents == 0
        # exact search is deterministic (a threaded HNSW build need not be)
        a = {r.name: r.metrics["ndcg@10"] for r in run.ok() if r.name.startswith("flat")}
        assert {r.name: r.metrics["ndcg@10"] for r in again.ok() if r.name.startswith("flat")} == a


class TestCli:
    def test_eval_records_exports_and_compares(self, evaluated, tmp_path, capsys):
        folder, spec, _ = evaluated
        ledger = f"duckdb:///{tmp_path / 'ledger.duckdb'}"
        args = ["eval", str(spec), "--ledger", ledger, "--cache-dir", str(folder / "cache")]
        assert main([*args, "--csv", str(tmp_path / "r.csv"), "--parquet", str(tmp_path / "r.parquet"),
                     "--html", str(tmp_path / "r.html")]) == 0
        out = capsys.readouterr().out
        assert "flat d64 f32" in out and "recommended:" in out and "recorded eval run" in out
        rows = list(csv.DictReader((tmp_path / "r.csv").open()))
        assert {"config", "ndcg@10", "ann_recall@10", "usd_per_useful", "pareto"} <= set(rows[0])
        import pyarrow.parquet as pq

        assert pq.read_table(tmp_path / "r.parquet").num_rows == len(rows)
        html = (tmp_path / "r.html").read_text()
        assert html.count("<svg") == 3 and "<script" not in html

        assert main([*args, "--max-queries", "4"]) == 0
        capsys.readouterr()
        assert main(["eval", "--compare", "previous", "last", "--ledger", ledger]) == 0
        out = capsys.readouterr().out
        assert "flat d64 f32" in out and "configuration(s) differ" in out

        import sqlalchemy as sa

        with sa.create_engine(ledger).connect() as conn:
            kinds = conn.execute(sa.text("select kind from rc_ledger_runs")).scalars().all()
            n = conn.execute(sa.text("select count(*) from rc_eval_results where status = 'ok'")).scalar()
        assert kinds == ["eval", "eval"] and n >= 20

    def test_a_missing_spec_is_one_line(self, tmp_path, capsys):
        assert main(["eval", str(tmp_path / "nope.yaml")]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "nope.yaml: file not found" in err

    def test_a_missing_dataset_file_is_one_line(self, tmp_path, capsys):
        write_beir(tmp_path / "data" / "synth")
        (tmp_path / "data" / "synth" / "queries.jsonl").unlink()
        spec = write_spec(tmp_path)
        assert main(["eval", str(spec), "--no-ledger", "--cache-dir", str(tmp_path / "cache")]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "missing file queries.jsonl" in err and err.count("\n") == 1

    def test_compare_names_an_unknown_run(self, tmp_path, capsys):
        assert main(["eval", "--compare", "abc", "last", "--ledger", f"duckdb:///{tmp_path / 'l.duckdb'}"]) == 1
        assert "no eval run 'abc'" in capsys.readouterr().err
