"""check_config: an index config checked against the backend it names, with the key that is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragcost.config.index import IndexConfig
from ragcost.config.loader import load_model
from ragcost.errors import ConfigError, UnknownNameError
from ragcost.index import build_params, check_config, index_registry, search_params
from ragcost.index.params import HNSWBuild, IVFSearch

REPO = Path(__file__).resolve().parents[2]


def test_an_unknown_backend_lists_the_installed_ones_and_names_the_field():
    with pytest.raises(UnknownNameError, match=r"unknown index backend 'hnsw'; installed: .*faiss, hnswlib") as e:
        check_config(IndexConfig(backend="hnsw"))
    assert e.value.field == ("backend",)


def test_a_kind_the_backend_lacks_lists_its_kinds_and_the_backend_that_has_it():
    with pytest.raises(ConfigError, match=r"backend 'hnswlib' has no kind 'ivf_pq'; use one of hnsw or backend: faiss") as e:
        check_config(IndexConfig(backend="hnswlib", kind="ivf_pq"))
    assert e.value.field == ("kind",)


def test_an_unknown_build_parameter_names_its_path_and_the_known_ones():
    with pytest.raises(ConfigError, match=r"build.efc: unknown build parameter for kind 'hnsw'; known: M, ef_construction") as e:
        check_config(IndexConfig(backend="hnswlib", kind="hnsw", build={"M": 16, "efc": 10}))
    assert e.value.field == ("build", "efc")


def test_a_bad_search_value_names_its_path():
    with pytest.raises(ConfigError, match=r"search.nprobe: .*greater than or equal to 1 \(got 0\)") as e:
        check_config(IndexConfig(backend="faiss", kind="ivf_flat", search={"nprobe": 0}))
    assert e.value.field == ("search", "nprobe")


def test_params_are_normalised_with_defaults_in_place():
    cfg = IndexConfig(backend="hnswlib", kind="hnsw", build={"M": 8})
    assert check_config(cfg) is cfg
    assert cfg.build == {"M": 8, "ef_construction": 200} and cfg.search == {"ef": 64}


def test_gpu_on_a_cpu_only_backend_is_refused():
    with pytest.raises(ConfigError, match="device: gpu: backend 'hnswlib' runs on cpu only") as e:
        check_config(IndexConfig(backend="hnswlib", device="gpu"))
    assert e.value.field == ("device",)


@pytest.mark.parametrize("kind,precision,fix", [
    ("hnsw", "int8", "hnswlib stores float32 only; use backend: faiss"),
])
def test_a_precision_the_backend_cannot_store_names_the_fix(kind, precision, fix):
    with pytest.raises(ConfigError, match=fix):
        check_config(IndexConfig(backend="hnswlib", kind=kind), precision=precision)


def test_precision_limits_are_per_kind():
    check_config(IndexConfig(backend="faiss", kind="flat"), precision="binary")
    with pytest.raises(ConfigError, match="kind ivf_pq with precision float16: PQ is its own compression") as e:
        check_config(IndexConfig(backend="faiss", kind="ivf_pq"), precision="float16")
    assert e.value.field == ("kind",)


def test_typed_params_come_from_the_index_layer():
    assert build_params(IndexConfig(backend="hnswlib", kind="hnsw")) == HNSWBuild()
    assert search_params(IndexConfig(backend="faiss", kind="ivf_pq"), nprobe=4) == IVFSearch(nprobe=4)
    with pytest.raises(ConfigError, match=r"search params \{'ef': 4\} for kind 'ivf_pq': ef: unknown key"):
        search_params(IndexConfig(backend="faiss", kind="ivf_pq"), ef=4)


def test_the_config_model_takes_any_backend_name_the_registry_decides():
    cfg = IndexConfig(backend="some-plugin", kind="whatever")
    assert cfg.backend == "some-plugin"
    assert "some-plugin" not in index_registry


@pytest.mark.parametrize("path", sorted((REPO / "indexes").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_index_files_load_and_check_unchanged(path):
    cfg = check_config(load_model(IndexConfig, path))
    assert cfg.kind in index_registry.get(cfg.backend).kinds


def test_filtered_search_params_widen_as_selectivity_drops():
    hnsw = check_config(IndexConfig(backend="hnswlib", kind="hnsw"))
    cls = index_registry.get("hnswlib")
    assert cls.filtered_search_params(hnsw, 10, 0.5) == {"ef": 256}
    assert cls.filtered_search_params(hnsw, 10, 0.01) == {"ef": 2048}
    ivf = check_config(IndexConfig(backend="faiss", kind="ivf_flat"))
    assert index_registry.get("faiss").filtered_search_params(ivf, 10, 0.5) == {"nprobe": 64}
    assert index_registry.get("faiss").filtered_search_params(IndexConfig(backend="faiss", kind="flat"), 10, 0.5) is None
