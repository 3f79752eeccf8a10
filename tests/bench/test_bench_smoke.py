"""Each benchmark runs at a tiny size and prints the JSON shape the README promises (no timing asserts)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import common


@pytest.fixture(autouse=True)
def bench_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "CACHE", tmp_path / "cache")


def printed(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_overhead_reports_raw_and_ragcost_side_by_side_with_pass_fields(capsys):
    from bench import overhead

    overhead.main(["--n", "3000", "--dim", "48", "--batch", "40", "--single", "10", "--repeats", "1",
                   "--indexes", "hnswlib-hnsw,faiss-ivf_pq"])
    out = printed(capsys)
    assert out["benchmark"] == "overhead" and set(out["indexes"]) == {"hnswlib-hnsw", "faiss-ivf_pq"}
    for r in out["indexes"].values():
        for side in ("raw", "ragcost"):
            assert {"batch_qps", "p50_us", "p99_us", "recall_at_k"} <= set(r[side])
        assert r["same_labels_as_raw"] is True and r["recall_diff"] == 0
        assert set(r["pass"]) == {"batch_qps_ratio_ge_0.95", "single_overhead_le_max_10pct_30us", "recall_equal_within_1e-4"}
    assert out["indexes"]["faiss-ivf_pq"]["ivf_pq_bytes"]["code_plus_id_per_vector"] == 56


@pytest.mark.slow
def test_filters_reports_every_bucket_and_strategy_and_auto_never_loses_results(capsys):
    from bench import filters

    filters.main(["--n", "3000", "--dim", "48", "--queries", "4", "--indexes", "hnswlib-hnsw"])
    out = printed(capsys)
    buckets = out["indexes"]["hnswlib-hnsw"]["buckets"]
    assert len(buckets) == 3 * len(filters.SELECTIVITIES) + 2
    assert {"recall_at_k", "p95_us"} <= set(out["indexes"]["hnswlib-hnsw"]["unfiltered"])
    for b in buckets.values():
        for strat in ("auto", "native", "exact"):
            assert {"recall_at_k", "share_with_k", "p50_us", "p95_us"} <= set(b[strat])
        assert b["auto"]["share_with_k"] == 1.0
        assert b["exact"]["recall_at_k"] == 1.0
        assert set(b["pass"]) == {"recall_ge_0.95", "k_results_every_query", "p95_le_2x_cheaper_pure"}


@pytest.mark.slow
def test_embed_compares_the_stage_with_sentence_transformers_encode(capsys):
    from bench import embed

    embed.main(["--texts", "12", "--repeats", "1", "--batch-size", "4"])
    out = printed(capsys)
    assert out["max_abs_vector_diff"] < 1e-5
    assert {"raw", "ragcost", "throughput_ratio", "pass"} <= set(out)


def test_route_queues_splits_the_workload_by_the_context_length_router():
    from bench import route_queues as rq

    reqs = rq.workload(40, 0.25, 3, 40, 4.0, seed=0)
    assert [r["at"] for r in reqs] == sorted(r["at"] for r in reqs)
    targets = rq.per_length_targets(reqs, rq._halfway(reqs, 16), 16)
    assert targets == [1 if r["long"] else 0 for r in reqs] and 0 < sum(targets) < len(reqs)


@pytest.mark.slow
def test_overhead_and_filters_have_pgvector_rows_beside_hnswlib(capsys, monkeypatch, pgvector_url):
    from bench import filters, overhead

    monkeypatch.setenv("RAGCOST_BENCH_PGVECTOR_URL", pgvector_url)
    overhead.main(["--n", "2000", "--dim", "32", "--batch", "20", "--single", "10", "--repeats", "1",
                   "--indexes", "pgvector-flat,pgvector-hnsw"])
    out = printed(capsys)
    flat, hnsw = out["indexes"]["pgvector-flat"], out["indexes"]["pgvector-hnsw"]
    assert flat["raw"]["recall_at_k"] == flat["ragcost"]["recall_at_k"] == 1.0
    assert hnsw["same_labels_as_raw"] is True and hnsw["bytes_per_vector"] > 32 * 4
    filters.main(["--n", "2000", "--dim", "32", "--queries", "4", "--indexes", "pgvector-hnsw"])
    buckets = printed(capsys)["indexes"]["pgvector-hnsw"]["buckets"]
    assert all(b["auto"]["share_with_k"] == 1.0 and b["exact"]["recall_at_k"] == 1.0 for b in buckets.values())


@pytest.mark.slow
def test_plan_ram_prints_model_beside_measurement_per_kind(capsys, monkeypatch, pgvector_url):
    from bench import plan_ram

    monkeypatch.setenv("RAGCOST_BENCH_PGVECTOR_URL", pgvector_url)
    plan_ram.main(["--n", "3000", "--dim", "32", "--pq-m", "8"])
    out = printed(capsys)
    assert set(out["kinds"]) == {"hnsw", "ivf_pq", "pgvector-hnsw"}
    for row in out["kinds"].values():
        assert row["measured_bytes"] > 0 and row["model_bytes"] > 0 and isinstance(row["pass_within_5pct"], bool)
    # pgvector's page model is exact at any size (the others carry fixed costs a tiny build magnifies)
    assert out["kinds"]["pgvector-hnsw"]["pass_within_5pct"]


@pytest.mark.slow
def test_sharded_hnsw_reports_one_graph_beside_the_shards_with_a_recall_pass_field(capsys):
    from bench import sharded_hnsw

    sharded_hnsw.main(["--n", "3000", "--dim", "48", "--queries", "50", "--shards", "3", "--local"])
    out = printed(capsys)
    assert out["benchmark"] == "sharded_hnsw" and out["sharded"]["shard_vectors"] == [1000, 1000, 1000]
    for side in ("one_graph", "sharded"):
        assert {"build_s", "recall_at_10", "batch_qps", "p50_us", "index_bytes"} <= set(out[side])
    assert out["sharded"]["largest_shard_bytes"] < out["sharded"]["index_bytes"]
    assert set(out["pass"]) == {"recall_sharded_ge_one_graph_minus_0.02"}


def test_doc_scoring_takes_each_documents_best_and_second_best_chunk():
    from bench.doc_scoring import doc_top2

    rng = np.random.default_rng(7)
    doc_of = rng.integers(0, 9, size=40)  # document 9 has no chunk; some have one
    doc_of[doc_of == 3] = 4
    doc_of[5] = 3  # exactly one chunk
    scores = rng.standard_normal((4, 40)).astype(np.float32)
    best, second = doc_top2(scores, doc_of, 10)
    for q in range(4):
        for d in range(10):
            mine = sorted(scores[q, doc_of == d].tolist(), reverse=True)
            assert best[q, d] == (mine[0] if mine else -np.inf)
            if len(mine) > 1:
                assert second[q, d] == pytest.approx(mine[1])
            else:
                assert np.isnan(second[q, d])


def test_bootstrap_reports_the_time_the_work_and_the_gap_to_scipy(capsys):
    from bench import bootstrap

    bootstrap.main(["--resamples", "200", "--queries", "50", "--configs", "5"])
    out = printed(capsys)
    assert out["benchmark"] == "bootstrap" and out["work"] == {"intervals": 5, "paired_with_p": 4, "cost_ratio_intervals": 5}
    assert set(out["pass"]) == {"wall_lt_5s", "ends_within_10pct_of_width_of_scipy"} and out["seconds"]["wall"] > 0


def test_eval_served_makes_a_beir_folder_of_the_quickstart_corpus_and_its_questions(tmp_path):
    from pydoc_data.topics import topics

    from bench import eval_served
    from ragcost.evaluate.datasets import load_dataset

    data, questions = eval_served.make_dataset(tmp_path, 5)
    ds = load_dataset(data, sorted(topics))
    asked = [json.loads(x)["_id"] for x in questions.read_text().splitlines()]
    assert list(ds.queries) == asked and len(asked) == 5  # the same questions both ways
    assert all(ds.qrels[q] for q in asked) and not ds.problems.lines()
    spec = eval_served.write_spec(tmp_path, data).read_text()
    assert "quickstart.yaml" in spec and "hnsw-m16.yaml" in spec  # the pipeline's own index file


def test_useful_features_prints_each_feature_sets_figures_per_seed(tmp_path, capsys):
    from bench import useful_features
    from tests.evaluate.conftest import write_beir, write_spec

    write_beir(tmp_path / "data" / "synth", n_docs=64)
    write_spec(tmp_path)
    useful_features.main(["--dataset", "synth", "--data", str(tmp_path / "data"), "--pipeline", str(tmp_path / "pipe.yaml"),
                          "--seeds", "2", "--cache-dir", str(tmp_path / "cache")])
    out = printed(capsys)["datasets"]["synth"]
    assert out["questions"] == 8 and set(out) == {"questions", *useful_features.SETS}
    for name, got in out.items():
        if name == "questions":
            continue
        assert len(got["seeds"]) == 2 and isinstance(got["meets_targets"], bool)
        assert {"total_ratio", "corr", "zero_credit", "zero_share"} == set(got["seeds"][0])


def test_index_estimate_prints_the_dry_runs_figures_beside_the_real_runs(tmp_path, capsys):
    from bench import index_estimate
    from tests.evaluate.conftest import write_beir

    write_beir(tmp_path / "data" / "synth", n_docs=48)
    index_estimate.main(["--dataset", "synth", "--data", str(tmp_path / "data"), "--docs", "20", "--repeats", "2"])
    out = printed(capsys)
    assert out["documents"] == 20 and out["chunks"]["estimated"] == out["chunks"]["embedded"] > 0
    assert out["chunks"]["sample"] == min(64, out["chunks"]["estimated"]) and out["chunks"]["ratio"] > 0
    raw = out["index_vs_raw_encode"]  # the same chunks through the raw library's encode, in the same run
    assert raw["chunks"] == out["chunks"]["embedded"] and len(raw["index_chunks_per_s"]) == 2
    assert raw["ratio_min"] <= raw["ratio_median"] and all(x > 0 for x in raw["raw_encode_chunks_per_s"])


def test_readers_reports_each_kind_on_the_folders_given(tmp_path, capsys):
    from bench import readers
    from tests.ingest.test_formats import HTML_PAGE, RST_PAGE, make_pdf

    (tmp_path / "html").mkdir(), (tmp_path / "rst").mkdir()
    for i in range(3):
        (tmp_path / "html" / f"p{i}.html").write_text(HTML_PAGE.replace("Refunds are", f"Refunds ({i}) are") + " " * 4000)
        (tmp_path / "rst" / f"r{i}.rst").write_text(RST_PAGE)
    (tmp_path / "a.pdf").write_bytes(make_pdf(["one two three", "four five"]))
    assert readers.main(["--html", str(tmp_path / "html"), "--pdf", str(tmp_path / "a.pdf"), "--rst", str(tmp_path / "rst")]) == 0
    out = json.loads(capsys.readouterr().out)
    mine = out["html"]["extractors"]["ragcost (html.parser)"]
    assert out["html"]["pages"] == 3 and mine["words"] == 3 * 13 and mine["pages_per_s"] > 0
    assert out["pdf"][str(tmp_path / "a.pdf")]["pypdfium2 (ragcost)"] == {**out["pdf"][str(tmp_path / "a.pdf")]["pypdfium2 (ragcost)"], "pages_with_text": 2, "words": 5}
    assert out["rst"]["files"] == 3 and out["rst"]["failed"] == 0 and out["rst"]["markup_marks_docutils"] == 0 < out["rst"]["markup_marks_raw"]


def test_ledger_beat_reports_a_querys_write_with_and_without_the_heartbeat(capsys):
    from bench import ledger_beat

    ledger_beat.main(["--queries", "5", "--rounds", "1"])
    out = printed(capsys)
    assert out["benchmark"] == "ledger_beat" and out["queries"] == 5
    for key in ("beat", "no_beat"):
        assert out[key]["cpu_ms_per_query"] > 0 and len(out[key]["cpu_ms_rounds"]) == 1
    assert out["heartbeat_share_of_the_write_cpu"] < 1
