from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

from ragcost.evaluate.report_html import bars, render, scatter, write_html
from ragcost.evaluate.run import ConfigResult, EvalRun


def fake_run() -> EvalRun:
    run = EvalRun(name="demo", spec_path="eval/demo.yaml", pipeline="p", dataset="synth", quality="ndcg@10", within_pct=2,
                  k=[10], metric_names=["ndcg@10", "recall@10"], queries=8, documents=96, chunks=120, native_dim=64,
                  embedded_documents=0, embed_seconds=0, query_embed_ms=3.0, price_book_version="v1", started_at="now")
    rng = np.random.default_rng(0)
    for i in range(12):
        r = ConfigResult(f"cfg-{i} d64 f32", index_file=f"idx{i % 4}.yaml", dim=64, precision="float32",
                         metrics={"ndcg@10": 0.5 + rng.random() * 0.2, "recall@10": 0.7, "ann_recall@10": 0.95},
                         p50_ms=0.1 + i / 10, p95_ms=0.2 + i / 5 + rng.random(), p99_ms=3.0, qps_single=1000, qps_batch=9000,
                         bytes_per_vector=100 + 40 * (i % 4), index_bytes=10_000, useful=10 + i,
                         total_usd=1e-5 * (1 + i % 5), usd_per_1k_queries=0.01)
        r.usd_per_useful = r.total_usd / r.useful
        run.results.append(r)
    run.results.append(ConfigResult("hnsw d64 int8", status="skipped", reason="hnswlib stores float32 only"))
    from ragcost.evaluate.pareto import mark

    mark(run.results, "ndcg@10", 2)
    return run


class TestRender:
    def test_the_report_is_self_contained_with_three_plots_and_the_table(self):
        html = render(fake_run())
        assert html.count("<svg") == 3 and "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
        assert html.count("<circle") >= 24 + 6 and "cfg-11 d64 f32" in html and "hnswlib stores float32 only" in html
        assert 'class="best"' in html and "recommended" in html

    def test_plots_survive_no_points_and_zero_useful(self):
        assert "no measured configurations" in scatter([], "x", "y", "t", log_x=True)
        svg = scatter([dict(x=None, y=0.5, label="zero useful", kind="other"), dict(x=1e-6, y=0.5, label="a", kind="front")],
                      "x", "y", "t", log_x=True)
        assert svg.count("<circle") == 1 + 3  # one point plus the legend
        assert "<rect" in bars([("a", 0.0)], "t", "B")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.slow
def test_the_report_renders_with_plots_in_headless_chromium(tmp_path):
    if _chromium() is None:
        msg = "no chromium on PATH (apt-get install -y chromium)"
        if os.environ.get("RAGCOST_REQUIRE_CHROMIUM"):
            pytest.fail(msg + "; RAGCOST_REQUIRE_CHROMIUM is set, so this is a failure, not a skip")
        pytest.skip(msg)
    from PIL import Image

    page = tmp_path / "report.html"
    write_html(fake_run(), page)
    shot = tmp_path / "shot.png"
    profile = tempfile.mkdtemp(dir=tmp_path)
    subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}", f"--screenshot={shot}",
         "--window-size=1400,2000", page.as_uri()],
        check=True, capture_output=True, timeout=120)
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert img.shape[:2] == (2000, 1400)

    def near(rgb: str) -> int:
        target = np.array([int(rgb[i:i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(img - target).sum(axis=2) < 40).sum())

    # Colours that only the plots use: bars, Pareto points, the recommended point.
    assert near("#4a77b4") > 2000, "the bytes-per-vector bars were not drawn"
    assert near("#d95f02") > 100, "the Pareto-front points were not drawn"
    assert near("#1b9e77") > 100, "the recommended point was not drawn"
    assert (img.sum(axis=2) < 720).mean() > 0.02, "the page is nearly blank"


class TestReliabilityDiagram:
    def test_it_draws_each_bucket_of_a_real_eval_runs_held_out_judge(self, tmp_path):
        from ragcost.evaluate.run import run_eval
        from ragcost.evaluate.spec import load_spec
        from tests.evaluate.conftest import REPO, write_beir, write_spec

        write_beir(tmp_path / "data" / "synth")
        spec = write_spec(tmp_path, grid=f"grid:\n  - index: {REPO}/indexes/flat.yaml\n", dims=[64], precisions=["float32"], k=[10])
        run = run_eval(load_spec(spec), tmp_path / "cache")
        [r] = run.ok()
        buckets = r.expected["quality"]["buckets"]
        assert buckets and "error" not in r.expected
        html = render(run)
        svg = html[html.index('<svg xmlns="http://www.w3.org/2000/svg" class="plot reliability"'):]
        svg = svg[:svg.index("</svg>")]
        assert svg.count('<circle class="bucket"') == len([b for b in buckets if b["documents"]])
        assert f"ECE {r.expected['quality']['ece']:.4f}" in svg and r.expected["label"] in svg
        b = buckets[0]
        assert f"{b['documents']} documents, predicted {b['predicted']:.1f} useful, qrels {b['actual']:.0f}" in svg

    def test_a_judge_that_could_not_be_fit_says_why(self):
        from ragcost.evaluate.report_html import reliability

        svg = reliability({"error": "12 judged documents, fewer than the 50 a fit needs"}, "t")
        assert "fewer than the 50" in svg and "<circle" not in svg
        assert "no expected-useful judge was fit" in reliability(None, "t")
