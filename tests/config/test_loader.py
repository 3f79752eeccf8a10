"""YAML → pydantic with errors that name file:line:column and the field; round trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragcost.config.index import IndexConfig
from ragcost.config.loader import dump_yaml, load_model, parse_yaml, validate
from ragcost.index import load_index_file
from ragcost.config.pipeline import PipelineConfig
from ragcost.errors import ConfigError
from ragcost.runtime.pipeline import Pipeline

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


class TestErrorsNameFileLineAndField:
    def test_malformed_yaml_gives_line_and_column(self, tmp_path):
        p = write(tmp_path, "name: x\nembed: {model: a\n")
        with pytest.raises(ConfigError, match=rf"{p}:\d+:\d+: malformed YAML"):
            load_model(PipelineConfig, p)

    def test_unknown_key_points_at_its_line(self, tmp_path):
        p = write(tmp_path, "name: x\nembed:\n  model: all-MiniLM-L6-v2\n  dims: 256\n")
        with pytest.raises(ConfigError, match=rf"{p}:4:3: embed.dims: unknown key"):
            load_model(PipelineConfig, p)

    def test_wrong_type_names_field_and_value(self, tmp_path):
        p = write(tmp_path, "name: x\nchunking: {size: big}\n")
        with pytest.raises(ConfigError, match=r"chunking.size: .*'big'"):
            load_model(PipelineConfig, p)

    def test_missing_required_field(self, tmp_path):
        p = write(tmp_path, "embed: {model: all-MiniLM-L6-v2}\n")
        with pytest.raises(ConfigError, match=r"name: required field is missing"):
            load_model(PipelineConfig, p)

    def test_duplicate_keys_are_refused(self, tmp_path):
        p = write(tmp_path, "name: x\nname: y\n")
        with pytest.raises(ConfigError, match="malformed YAML"):
            load_model(PipelineConfig, p)

    def test_bad_metadata_type_lists_the_known_types(self, tmp_path):
        p = write(tmp_path, "name: x\nmetadata: {year: integer}\n")
        with pytest.raises(ConfigError, match=r"metadata.*unknown type 'integer'.*list\[str\]"):
            load_model(PipelineConfig, p)

    def test_overlap_not_smaller_than_size(self, tmp_path):
        p = write(tmp_path, "name: x\nchunking: {size: 32, overlap: 32}\n")
        with pytest.raises(ConfigError, match="overlap"):
            load_model(PipelineConfig, p)

    # IndexConfig is plain since the backends describe themselves (tests/index/test_check.py checks
    # check_config); here: a pipeline that loads a bad index file names that file and the key.
    def test_unknown_index_parameter_lists_known_ones(self, tmp_path):
        p = write(tmp_path, "backend: hnswlib\nkind: hnsw\nbuild: {M: 16, efc: 10}\n", "i.yaml")
        with pytest.raises(ConfigError, match=r"i.yaml:3:\d+: .*build.efc: unknown build parameter .*M, ef_construction"):
            load_index_file(p)

    def test_kind_the_backend_lacks(self, tmp_path):
        p = write(tmp_path, "backend: hnswlib\nkind: ivf_pq\n", "i.yaml")
        with pytest.raises(ConfigError, match="i.yaml:2:1: .*hnswlib.*ivf_pq.*backend: faiss"):
            load_index_file(p)

    def test_a_pipeline_naming_a_bad_index_file_says_file_line_and_key(self, tmp_path):
        write(tmp_path, "backend: hnswlib\nkind: hnsw\nbuild: {M: 16, efc: 10}\n", "i.yaml")
        p = write(tmp_path, "name: x\nindex: i.yaml\n")
        with pytest.raises(ConfigError, match=r"i\.yaml:3:\d+: .*build.efc: unknown build parameter .*M, ef_construction"):
            Pipeline.load(p)

    def test_an_inline_index_kind_the_backend_lacks(self, tmp_path):
        p = write(tmp_path, "name: x\nindex: {backend: hnswlib, kind: ivf_pq}\n")
        with pytest.raises(ConfigError, match=rf"^{p}:\d+:\d+: index.kind: .*hnswlib.*ivf_pq.*backend: faiss"):
            Pipeline.load(p)

    def test_empty_file(self, tmp_path):
        p = write(tmp_path, "")
        with pytest.raises(ConfigError, match="empty"):
            Pipeline.load(p)

    def test_missing_file(self, tmp_path):
        with pytest.raises(ConfigError, match="file not found"):
            Pipeline.load(tmp_path / "nope.yaml")

    def test_stage_param_error_points_into_the_stage(self, tmp_path):
        p = write(tmp_path, "name: x\nstages:\n  - type: retrieve\n    k: 0\n")
        with pytest.raises(ConfigError, match=rf"{p}:4:\d+: stages.0.k"):
            Pipeline.load(p)

    def test_unknown_stage_lists_known(self, tmp_path):
        p = write(tmp_path, "name: x\nstages:\n  - {type: retreive}\n")
        with pytest.raises(ConfigError, match=r"unknown stage type 'retreive'; installed: .*retrieve"):
            Pipeline.load(p)

    def test_hnswlib_with_int8_is_refused(self, tmp_path):
        p = write(tmp_path, "name: x\nembed: {precision: int8}\nindex: {backend: hnswlib, kind: hnsw}\n")
        with pytest.raises(ConfigError, match="hnswlib stores float32 only"):
            Pipeline.load(p)

    def test_unknown_resource_in_pipeline_names_its_line(self, tmp_path):
        p = write(tmp_path, f"name: x\npricing: {REPO / 'pricing' / 'default.yaml'}\nresource: tpu-v9\n")
        with pytest.raises(ConfigError, match=rf"{p}:3:\d+: unknown resource 'tpu-v9'"):
            Pipeline.load(p).check()


@pytest.mark.parametrize("path", sorted((REPO / "pipelines").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_pipelines_validate_and_round_trip(path):
    pipe = Pipeline.load(path)
    pipe.check()
    again = validate(PipelineConfig, parse_yaml(dump_yaml(pipe.config)), "dump")
    assert again == pipe.config


@pytest.mark.parametrize("path", sorted((REPO / "indexes").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_index_configs_round_trip(path):
    cfg = load_model(IndexConfig, path)
    assert validate(IndexConfig, parse_yaml(dump_yaml(cfg)), "dump") == cfg


def test_schema_lists_every_stage_type():
    from ragcost.runtime.schema import json_schema
    from ragcost.stages.base import stage_registry

    schema = json_schema("pipeline")
    titles = {s["properties"]["type"]["const"] for s in schema["properties"]["stages"]["items"]["oneOf"]}
    assert titles == set(stage_registry.names())
    assert "embed" in schema["properties"] and json_schema("index")["properties"]["kind"]
    assert json_schema("pricing")["properties"]["resources"]


def _alias_bomb(levels: int = 9, width: int = 9) -> str:
    """About 500 bytes that expand to width**levels values when the aliases are copied out."""
    lines = ["a: &a [" + ",".join(['"lol"'] * width) + "]"]
    names = "abcdefghijklmnop"
    for prev, cur in zip(names, names[1:levels]):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * width) + "]")
    return "\n".join(lines) + "\n"


class TestYamlAliases:
    def test_alias_bomb_is_refused_quickly_with_file_line(self, tmp_path):
        import time
        from ragcost.config.loader import read_yaml

        p = write(tmp_path, _alias_bomb())
        t0 = time.perf_counter()
        with pytest.raises(ConfigError, match=rf"^{p}:\d+:\d+: YAML aliases here expand to more than [\d,]+ values; write the values out"):
            read_yaml(p)
        assert time.perf_counter() - t0 < 1.0

    def test_alias_bomb_in_a_pipeline_fails_validation_not_the_machine(self, tmp_path):
        p = write(tmp_path, "name: x\n" + _alias_bomb(levels=6))  # 9**6 values: old code survives it, and fails
        with pytest.raises(ConfigError, match="YAML aliases"):
            load_model(PipelineConfig, p)

    def test_modest_anchors_and_merge_keys_still_load(self):
        data = parse_yaml("base: &base {size: 2}\nx: *base\ny: {<<: *base, o: 1}\nz: [*base, *base]\n")
        assert data["x"]["size"] == 2 and data["y"]["o"] == 1 and len(data["z"]) == 2
