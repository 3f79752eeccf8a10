from __future__ import annotations

import pytest

from ragcost.errors import ConfigError
from ragcost.evaluate.spec import expand, load_spec
from tests.evaluate.conftest import REPO, write_beir, write_spec


@pytest.fixture
def folder(tmp_path):
    write_beir(tmp_path / "data" / "synth")
    return tmp_path


class TestLoadSpec:
    def test_the_shipped_specs_load(self):
        for name in ("scifact-indexes", "cranfield-indexes", "scifact-runtimes", "scifact-tune"):
            ls = load_spec(REPO / "eval" / f"{name}.yaml")
            assert ls.pipeline_path.is_file() and ls.spec.grid

    def test_an_unknown_key_names_file_line_and_field(self, folder):
        p = write_spec(folder, colour="blue")
        with pytest.raises(ConfigError, match=r"spec\.yaml:7:1: colour: unknown key"):
            load_spec(p)

    def test_a_sweep_key_the_index_kind_lacks_is_an_error_with_its_line(self, folder):
        grid = f"grid:\n  - index: {REPO}/indexes/flat.yaml\n    sweep: {{nprobe: [4]}}"
        with pytest.raises(ConfigError, match=r"spec\.yaml:9:\d+: grid\.0\.sweep\.nprobe: not a search parameter of kind 'flat'"):
            load_spec(write_spec(folder, grid=grid))

    def test_a_glob_that_matches_nothing_is_an_error(self, folder):
        grid = f"grid:\n  - index: {REPO}/indexes/nothing-*.yaml"
        with pytest.raises(ConfigError, match=r"grid\.0\.index: no index file matches"):
            load_spec(write_spec(folder, grid=grid))

    def test_a_glob_expands_to_every_matching_index(self, folder):
        grid = f"grid:\n  - index: {REPO}/indexes/ivfpq-m*.yaml"
        ls = load_spec(write_spec(folder, grid=grid))
        assert len(ls.entries[0]) >= 2

    def test_an_unknown_metric_is_an_error(self, folder):
        with pytest.raises(ConfigError, match="unknown metric 'map'"):
            load_spec(write_spec(folder, metrics=["map"]))

    def test_a_missing_dataset_folder_is_an_error_naming_it(self, folder):
        p = write_spec(folder)
        p.write_text(p.read_text().replace("data/synth", "data/gone"))
        with pytest.raises(ConfigError, match="dataset: folder not found: .*data/gone"):
            load_spec(p)

    def test_rerank_without_a_registered_rerank_stage_is_a_clear_error(self, folder, monkeypatch):
        from ragcost.stages.base import stage_registry

        monkeypatch.setattr(stage_registry, "_items", {k: v for k, v in stage_registry._items.items() if k != "rerank"})
        monkeypatch.setitem(__import__("sys").modules, "ragcost.stages.rerank", None)  # as if not installed
        grid = f"grid:\n  - index: {REPO}/indexes/flat.yaml\n    rerank: {{type: rescore}}"
        with pytest.raises(ConfigError, match=r"grid\.0\.rerank: no stage type 'rerank' is registered"):
            load_spec(write_spec(folder, grid=grid))


    def test_a_grid_rerank_names_its_scores_as_the_pipeline_stage_does(self, folder):
        from ragcost.runtime.judge import scoring_of
        from ragcost.stages.rerank.stage import RerankParams

        grid = f"grid:\n  - index: {REPO}/indexes/flat.yaml\n    rerank: {{type: hybrid, rrf_k: 20, top_n: 5}}"
        ls = load_spec(write_spec(folder, grid=grid))
        [(_, params)] = ls.stages.values()
        # `type:` in a grid names the backend; the calibration eval writes must match the stage a pipeline loads
        assert scoring_of(params) == scoring_of(RerankParams(backend="hybrid", rrf_k=20)) \
            == {"backend": "hybrid", "model": None, "options": {"rrf_k": 20}}


class TestExpand:
    def test_impossible_combinations_are_skipped_with_the_reason(self, folder):
        ls = load_spec(write_spec(folder, dims=[64, 32, 128]))
        cands, skipped = expand(ls, native_dim=64, default_dim=64)
        reasons = {s.name: s.reason for s in skipped}
        assert "hnswlib stores float32 only" in reasons["hnsw-m16 d64 int8"]
        assert "PQ is its own compression" in reasons["ivfpq-m24 d64 int8"]
        assert "24 does not divide dim 32" in reasons["ivfpq-m24 d32 f32"]
        assert "larger than the model's 64" in reasons["flat d128 f32"]
        names = [c.name for c in cands]
        assert "hnsw-m16 d64 f32 ef=8" in names and "hnsw-m16 d64 f32 ef=64" in names
        assert "ivf-flat d32 int8 nprobe=4" in names and "flat d64 int8" in names
        assert len(names) == len(set(names))

    def test_sweep_values_share_one_build(self, folder):
        cands, _ = expand(load_spec(write_spec(folder)), 64, 64)
        hnsw = [c for c in cands if c.name.startswith("hnsw-m16 d64")]
        assert len(hnsw) == 2 and hnsw[0].build_key == hnsw[1].build_key
        assert [c.search["ef"] for c in hnsw] == [8, 64]


class TestRoundTrip:
    def test_load_dump_load_gives_the_same_spec(self):
        from ragcost.config.loader import dump_yaml, parse_yaml, validate
        from ragcost.evaluate.spec import EvalSpec

        spec = load_spec(REPO / "eval" / "scifact-indexes.yaml").spec
        again = validate(EvalSpec, parse_yaml(dump_yaml(spec)), "dumped")
        assert again == spec
