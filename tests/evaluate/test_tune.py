"""`ragcost tune`: the cheapest configuration above the floor, found without running the full grid."""

from __future__ import annotations

import json
import re

import pytest

from ragcost.cli.main import main
from ragcost.errors import ConfigError
from ragcost.evaluate.run import run_eval
from ragcost.evaluate.spec import load_spec
from ragcost.evaluate.tune import ASSUMPTIONS, summary_lines, tune
from tests.evaluate.conftest import REPO, write_beir, write_spec

GRID = f"""grid:
  - index: {REPO}/indexes/flat.yaml
  - index: {REPO}/indexes/hnsw-m16.yaml
    sweep: {{ef: [8, 16, 64]}}
  - index: {REPO}/indexes/ivf-flat.yaml
    sweep: {{nprobe: [1, 2, 4]}}"""


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tune")
    write_beir(folder / "data" / "synth", n_docs=160)
    spec = write_spec(folder, GRID, dims=[64, 48, 32], precisions=["float32", "int8"], k=[10])
    pipe = json.loads((folder / "pipe.yaml").read_text())
    (folder / "pipe.yaml").write_text(json.dumps({**pipe, "index": {"backend": "faiss", "kind": "flat"}}))
    cache = folder / "cache"
    return folder, spec, tune(load_spec(spec), 0.98, cache), run_eval(load_spec(spec), cache)


class TestTune:
    def test_runs_fewer_configurations_than_the_full_grid(self, tuned):
        _, _, rep, full = tuned
        assert rep.full_grid == len(full.ok())
        assert 0 < rep.ran < rep.full_grid

    def test_the_choice_is_above_the_floor_of_the_best_quality_in_the_full_grid(self, tuned):
        _, _, rep, full = tuned
        best = max(r.metrics["ndcg@10"] for r in full.ok())
        assert rep.chosen.metrics["ndcg@10"] >= 0.98 * best - 1e-9

    def test_the_choice_is_no_dearer_than_the_pipelines_configuration(self, tuned):
        rep = tuned[2]
        assert rep.baseline.name == "flat d64 f32"
        assert rep.chosen.usd_per_useful <= rep.baseline.usd_per_useful
        assert rep.savings() == pytest.approx(1 - rep.chosen.usd_per_useful / rep.baseline.usd_per_useful)

    def test_every_step_says_why_the_walk_went_on_or_stopped(self, tuned):
        rep = tuned[2]
        assert rep.steps[0].verdict.startswith("ceiling")
        assert all(s.verdict for s in rep.steps)
        assert any("stop" in s.verdict for s in rep.steps) or rep.pruned

    def test_cli_prints_the_path_the_savings_and_the_count_and_writes_the_pipeline(self, tuned, capsys):
        folder, spec, rep, _ = tuned
        pipe = folder / "pipe.yaml"
        import yaml

        from ragcost.runtime.pipeline import Pipeline

        pipe.write_text("# our pipeline\n" + yaml.safe_dump(json.loads(pipe.read_text()), sort_keys=False))
        assert main(["tune", str(spec), "--floor", "0.98", "--cache-dir", str(folder / "cache"), "--write"]) == 0
        out = capsys.readouterr().out
        assert f"of the full grid's {rep.full_grid} configurations" in out
        assert "pipeline's current configuration: flat d64 f32" in out
        chosen = re.search(r"chosen: (.+?) — ", out).group(1)  # timings differ run to run: this run's choice
        assert re.search(r"^chosen: .+ B/vector$", out, re.M)  # redirected output keeps each line whole
        text = pipe.read_text()
        assert text.startswith("# our pipeline") and "# ragcost tune: ndcg@10" in text
        p = Pipeline.load(pipe)
        r = next(r for r in tuned[3].ok() if r.name == chosen)  # the full grid's result of that name
        assert (p.dim, p.config.embed.precision) == (r.dim, r.precision)
        ic = p.index_config
        assert (ic.backend, ic.kind, dict(ic.build), dict(ic.search)) == (r.backend, r.kind, dict(r.build), dict(r.search))

    def test_every_configuration_of_the_grid_written_back_loads_as_itself(self, tuned, tmp_path):
        from ragcost.evaluate.tune_write import write_choice
        from ragcost.runtime.pipeline import Pipeline

        folder, _, _, full = tuned
        for r in full.ok():  # the file's own search parameters, and sweep points written inline
            pipe = tmp_path / "pipe.yaml"
            pipe.write_text((folder / "pipe.yaml").read_text())
            write_choice(pipe, r, "test")
            p = Pipeline.load(pipe)
            ic = p.index_config
            assert (p.dim, p.config.embed.precision) == (r.dim, r.precision), r.name
            assert (ic.backend, ic.kind, dict(ic.build), dict(ic.search)) == (r.backend, r.kind, dict(r.build), dict(r.search)), r.name


    def test_a_choice_on_another_runtime_drops_the_old_runtimes_options(self, tuned, tmp_path):
        import dataclasses

        import yaml

        from ragcost.config.pipeline import EmbedConfig
        from ragcost.evaluate.tune_write import write_choice

        folder, _, _, full = tuned
        cfg = yaml.safe_load((folder / "pipe.yaml").read_text())  # JSON, or the YAML an earlier test wrote
        pipe = tmp_path / "pipe.yaml"
        pipe.write_text(yaml.safe_dump({**cfg, "embed": {"type": "sentence-transformers", "dtype": "bfloat16", "batch_size": 16}}))
        r = dataclasses.replace(full.ok()[0], embed={"type": "onnx", "onnx": {"quantize": "int8"}})
        write_choice(pipe, r, "test")
        embed = yaml.safe_load(pipe.read_text())["embed"]
        assert embed["type"] == "onnx" and embed["onnx"] == {"quantize": "int8"} and "dtype" not in embed
        assert embed["batch_size"] == 16  # what is not a runtime's own stays
        EmbedConfig.model_validate(embed)  # and the pipeline's embed is valid again


SHARED = f"""grid:
  - index: {REPO}/indexes/flat.yaml
  - index: {REPO}/indexes/flat.yaml
    rerank: {{type: rescore, top_n: 10}}
    candidates: 20
  - index: {REPO}/indexes/hnsw-m16.yaml
    sweep: {{ef: [8, 64]}}"""


class TestEntriesSharingAnIndexFile:
    """Two grid entries on indexes/flat.yaml (plain, and with a re-ranker) are two branches of the walk: before,
    they collapsed into one, and tune walked the second entry's dims and precisions only."""

    @pytest.fixture(scope="class")
    def shared(self, tmp_path_factory):
        folder = tmp_path_factory.mktemp("shared")
        write_beir(folder / "data" / "synth", n_docs=160)
        spec = write_spec(folder, SHARED, dims=[64, 32], precisions=["float32", "int8"], k=[10])
        cache = folder / "cache"
        full = run_eval(load_spec(spec), cache)
        return tune(load_spec(spec), 0.4, cache, measured=full.results), full

    def test_every_flat_configuration_of_both_entries_is_measured_when_all_pass(self, shared):
        rep, full = shared
        flats = {r.name for r in full.ok() if r.kind == "flat"}
        assert len(flats) == 8  # 2 entries x 2 dims x 2 precisions, none of them collapsed
        assert flats <= {s.result.name for s in rep.steps}

    def test_the_pick_is_evals(self, shared):
        rep, full = shared
        assert rep.chosen.name == next(r.name for r in full.ok() if r.recommended)


class TestAgreesWithEval:
    """On the seeded grid, tune's walk (over eval's own measurements: no timing noise between the two)
    picks what eval picks, at the spec's floor and at others; every skip names its assumption."""

    @pytest.mark.parametrize("floor", [None, 0.9, 0.995])
    def test_the_pick_is_evals_at_each_floor(self, tuned, floor):
        from ragcost.evaluate.pareto import mark

        folder, spec, _, full = tuned
        within = 2.0 if floor is None else (1 - floor) * 100
        mark(full.results, "ndcg@10", within)
        rep = tune(load_spec(spec), floor, folder / "cache", measured=full.results)
        assert rep.chosen.name == next(r.name for r in full.ok() if r.recommended), "\n".join(summary_lines(rep))
        assert rep.ran < rep.full_grid or rep.failed
        assert all(s.assumption in ASSUMPTIONS for s in rep.skips)
        mark(full.results, "ndcg@10", 2.0)

    def test_the_default_floor_is_the_specs_within_pct(self, tuned):
        folder, spec, _, full = tuned
        assert tune(load_spec(spec), None, folder / "cache", measured=full.results).floor == pytest.approx(0.98)


class TestDominanceBound:
    """The bound that prunes a build must never exceed what the eval charges that build at the same useful count:
    an overestimate skips configurations that are in fact cheaper."""

    @pytest.fixture(scope="class")
    def measured(self, tmp_path_factory):
        from ragcost.evaluate.metrics import exact_kth
        from ragcost.evaluate.run import _noop, _prepare
        from ragcost.runtime.pipeline import Pipeline

        folder = tmp_path_factory.mktemp("bound")
        write_beir(folder / "data" / "synth", n_docs=160)
        spec = write_spec(folder, GRID, dims=[64], precisions=["float32", "int8"], k=[10])
        ls = load_spec(spec)
        pipe = Pipeline.load(ls.pipeline_path, judge=False)
        _, ev, cands = _prepare(ls, pipe, folder / "cache", _noop)
        kth = exact_kth(ev.queries_at(64), ev.vectors_at(64), ev.corpus.doc_of, ev.spec.k)
        out = []
        for c in cands:
            index, build_s = ev.build(c)
            out.append((c, index, ev.measure(c, index, build_s, kth)))
        yield ev, out
        pipe.close()

    def test_the_bound_is_the_eval_price_less_the_search_for_every_build(self, measured):
        from ragcost.evaluate.tune import _lower_bound

        ev, out = measured
        kinds = {(c.index_config.kind, c.precision) for c, _, _ in out}
        assert {("hnsw", "float32"), ("flat", "float32"), ("flat", "int8"), ("ivf_flat", "int8")} <= kinds
        for c, index, r in out:
            usd = {s["stage"]: s["usd"] for s in r.stages}
            bound = _lower_bound(ev, c, r, int(index.nbytes()))  # r as its own ceiling: the same useful documents
            # eval prices the path as served (evaluate.served): the embedding (the query set's one measurement,
            # the same for every build), the search with its store read, the CPU between calls, and storage of
            # the index, its copy and the store's tables; the bound is the embedding and the index's storage
            assert usd["embed"] < bound * r.useful < r.total_usd - usd["retrieve"] - usd["overhead"], c.name
            assert bound * r.useful - usd["embed"] < usd["storage"], c.name

    def test_a_bound_within_the_picks_served_spread_is_not_dominated(self):
        """Three timed passes 10% apart: a build bounded 20% above the incumbent can be priced below it by the
        machine alone (eval picked an ef=64 that tune had stopped short of, stop 52), so it is not skipped."""
        from types import SimpleNamespace

        from ragcost.evaluate.tune import _dominated

        quiet = SimpleNamespace(usd_per_useful=1.0, timing_noise=0.0, total_usd=1.0, stages=[], served_noise=0.0)
        loud = SimpleNamespace(**{**vars(quiet), "served_noise": 0.10})
        assert _dominated(1.2, quiet)  # beyond twice the 2% noise floor
        assert not _dominated(1.2, loud)  # inside 1 + 2 x 2% + 2 x 10%
        assert _dominated(1.25, loud)

    def test_the_bound_before_a_build_is_below_the_bound_after_it(self, measured):
        from ragcost.evaluate.tune import _lower_bound

        ev, out = measured
        for c, index, r in out:
            assert _lower_bound(ev, c, r) <= _lower_bound(ev, c, r, int(index.nbytes())) * (1 + 1e-12), c.name


class TestBadTune:
    def test_a_floor_outside_zero_to_one_is_refused(self, synth):
        with pytest.raises(ConfigError, match=r"--floor 1.5: give a fraction"):
            tune(load_spec(synth), 1.5, synth.parent / "cache")

    def test_a_grid_without_a_flat_index_is_refused(self, tmp_path):
        write_beir(tmp_path / "data" / "synth")
        spec = write_spec(tmp_path, f"grid:\n  - index: {REPO}/indexes/hnsw-m16.yaml")
        with pytest.raises(ConfigError, match="tune needs a flat index in the grid"):
            tune(load_spec(spec), 0.98, tmp_path / "cache")


class TestTraffic:
    """tune prices at a traffic, as eval does, and its bound with it: eval --traffic 64 and a tune at its default
    (one at a time) compared a bound whose query embedding alone cost more than whole configurations measured in
    64s, and skipped SciFact's ivf-flat d384 as dominated where eval picked it (CI, stop 50)."""

    @pytest.fixture(scope="class")
    def at16(self, tmp_path_factory):
        folder = tmp_path_factory.mktemp("traffic")
        write_beir(folder / "data" / "synth", n_docs=160)
        spec = write_spec(folder, GRID, dims=[32], precisions=["float32"], k=[10])  # 1 exact, 6 approximate
        full = run_eval(load_spec(spec), folder / "cache", traffic="16")
        return folder, spec, full, tune(load_spec(spec), 0.98, folder / "cache", measured=full.results, traffic="16")

    def test_the_walk_is_priced_at_the_traffic_given_and_says_so(self, at16):
        _, _, full, rep = at16
        assert rep.traffic == full.traffic and rep.traffic["batch"] == 16
        assert f"priced at: {full.traffic['label']}" in summary_lines(rep)

    def test_a_bound_is_at_or_below_what_eval_charges_each_build_it_prices_at_that_traffic(self, at16):
        from ragcost.evaluate.run import _noop, _prepare
        from ragcost.evaluate.tune import _lower_bound
        from ragcost.runtime.pipeline import Pipeline

        folder, spec, full, _ = at16
        ls = load_spec(spec)
        pipe = Pipeline.load(ls.pipeline_path, judge=False)
        try:
            _, ev, cands = _prepare(ls, pipe, folder / "cache", _noop, traffic="16")
            by = {r.name: r for r in full.ok()}
            checked = 0
            for c in cands:
                r = by[c.name]
                flat = max((x for x in full.ok() if x.kind == "flat" and (x.dim, x.precision) == (c.dim, c.precision)),
                           key=lambda x: x.useful)
                bound = _lower_bound(ev, c, flat, int(r.index_bytes))
                if bound is not None and c.index_config.kind != "flat":
                    assert bound * flat.useful <= r.total_usd, c.name  # embed + storage, never the search: below
                    checked += 1
            assert checked >= 6
        finally:
            pipe.close()

    def test_the_cli_takes_traffic_and_refuses_a_bad_one_in_a_line(self, at16, capsys):
        folder, spec, _, _ = at16
        assert main(["tune", str(spec), "--traffic", "16", "--cache-dir", str(folder / "cache")]) == 0
        out = capsys.readouterr().out
        assert "priced at: batches of 16" in out
        assert main(["tune", str(spec), "--traffic", "x", "--cache-dir", str(folder / "cache")]) != 0
        err = capsys.readouterr().err
        assert "--traffic 'x': use one, serve or a batch size" in err and "Traceback" not in err
