"""eval prices each configuration as served: the pipeline's whole query path, at the traffic it will see."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragcost.evaluate.run import run_eval
from ragcost.evaluate.spec import load_spec
from tests.evaluate.conftest import REPO, write_beir, write_spec

STAGES = [
    {"type": "guard", "on": "query", "checks": ["pii"]},
    {"type": "retrieve", "k": 5},
    {"type": "generate", "backend": "extractive", "sentences": 2},
]
FLAT = f"grid:\n  - index: {REPO}/indexes/flat.yaml\n"


def _spec(folder, stages=STAGES, **pipe_extra):
    write_beir(folder / "data" / "synth")
    spec = write_spec(folder, grid=FLAT, dims=[64], precisions=["float32"], k=[5])
    cfg = json.loads((folder / "pipe.yaml").read_text())
    cfg.update(stages=stages, **pipe_extra)
    (folder / "pipe.yaml").write_text(json.dumps(cfg))
    return spec


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    return run_eval(load_spec(_spec(folder)), folder / "cache")


def test_every_stage_of_the_pipeline_is_priced_and_named(served):
    r = served.ok()[0]
    assert r.path == "embed + guard:query + retrieve + generate + overhead (ledger write included)"
    assert [s["stage"] for s in r.stages] == ["embed", "guard:query", "retrieve", "generate", "generate/overhead", "overhead", "storage"]
    assert all(s["usd"] > 0 for s in r.stages)
    assert served.traffic["batch"] == 1 and served.traffic["how"] == "one"


def test_the_search_row_is_marked_for_the_timing_noise_even_when_the_pipeline_renames_retrieve(served, tmp_path):
    assert [s["stage"] for s in served.ok()[0].stages if s.get("search")] == ["retrieve"]
    stages = [{**st, "name": "search"} if st["type"] == "retrieve" else st for st in STAGES]
    r = run_eval(load_spec(_spec(tmp_path, stages)), tmp_path / "cache").ok()[0]
    assert [s["stage"] for s in r.stages if s.get("search")] == ["search"]


def test_each_querys_dollars_sum_to_the_configurations(served):
    r = served.ok()[0]
    assert len(r.per_query["usd"]) == r.queries and (r.per_query["usd"] > 0).all()
    assert r.per_query["usd"].sum() == pytest.approx(r.total_usd, rel=1e-9)


def test_the_latency_is_the_whole_path_not_the_search(served):
    r = served.ok()[0]
    # one at a time, every stage call of a query is its own: its latency is their sum, far above a flat search
    # of 96 chunks (microseconds)
    assert r.p50_ms > 0.1 and r.qps_single < r.qps_batch


def test_a_stage_eval_cannot_run_is_left_out_and_said(tmp_path):
    stages = [{"type": "cache", "tiers": ["exact"]}, *STAGES]
    run = run_eval(load_spec(_spec(tmp_path, stages)), tmp_path / "cache")
    r = run.ok()[0]
    assert "cache" not in r.path and any(w.startswith("not priced: cache:") for w in r.warnings)


def test_batched_traffic_makes_the_embedding_cheaper_per_query_and_is_labelled(tmp_path):
    spec = load_spec(_spec(tmp_path))
    one = run_eval(spec, tmp_path / "cache").ok()[0]
    batched = run_eval(spec, tmp_path / "cache", traffic="9")
    assert batched.traffic == {"batch": 9, "how": "option", "label": "batches of 9 (--traffic 9)"}
    usd = lambda r: next(s["usd"] for s in r.stages if s["stage"] == "embed")  # noqa: E731
    assert usd(batched.ok()[0]) < usd(one)  # one call of 9 queries, not 9 calls
    per = batched.ok()[0].per_query["usd"]
    assert per.sum() == pytest.approx(batched.ok()[0].total_usd, rel=1e-9) and len(np.unique(per)) > 1


def test_the_terminal_table_says_what_its_columns_include(tmp_path, capsys):
    from tests.cli.conftest import run_cli

    spec = _spec(tmp_path)
    code, out, err = run_cli(capsys, "eval", spec, "--no-ledger", "--cache-dir", tmp_path / "cache")
    assert code == 0, err
    assert "path p95 ms" in out
    assert "path = what a served query waits for and pays: embed + guard:query + retrieve + generate + overhead (ledger write included)" in " ".join(out.split())
    code, out, err = run_cli(capsys, "eval", spec, "--no-ledger", "--cache-dir", tmp_path / "cache", "--traffic", "lots")
    assert code != 0 and "--traffic 'lots': use one, serve or a batch size 1-4096" in err and len(err.strip().splitlines()) == 1


def test_served_rounds_sets_the_timed_passes_and_one_pass_says_its_noise_is_not_measured(tmp_path, monkeypatch):
    import ragcost.runtime.runner as runner_mod

    passes = []
    real = runner_mod.Runner

    class Counting(real):  # every Runner.run of a timed pass (the warm pass's runner has no embed stage)
        def run(self, states):
            if any(getattr(st, "type", "") == "embed" for st in self.stages):
                passes.append(len(states))
            return super().run(states)

    monkeypatch.setattr(runner_mod, "Runner", Counting)  # served.measure imports it when it runs
    spec = load_spec(_spec(tmp_path))
    spec.spec.served_rounds = 3  # eval's default (the tests' synthetic specs time one pass)
    run_eval(spec, tmp_path / "cache")  # the query set's embed measurement, cached: the runs below only time passes
    passes[:] = []
    three = run_eval(spec, tmp_path / "cache")
    n3, passes[:] = sum(passes), []
    spec.spec.served_rounds = 1
    one = run_eval(spec, tmp_path / "cache")
    n1 = sum(passes)
    assert n3 == 3 * n1 == 3 * three.queries  # one at a time: a query per call, three passes against one
    assert not any("served_rounds" in w for w in three.warnings)
    assert any(w.startswith("served_rounds 1:") and "not measured" in w for w in one.warnings)
    assert one.ok()[0].served_noise == 0 and one.ok()[0].total_usd > 0


@pytest.mark.parametrize("bad", [0, 2, 11])
def test_served_rounds_must_be_an_odd_count_from_1_to_9(tmp_path, bad):
    from ragcost.errors import ConfigError

    path = _spec(tmp_path)
    path.write_text(path.read_text() + f"served_rounds: {bad}\n")
    with pytest.raises(ConfigError, match="served_rounds"):
        load_spec(path)
