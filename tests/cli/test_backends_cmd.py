"""``ragcost backends`` lists every registry's entries, where each is defined, and the plugins that failed to load."""

from __future__ import annotations

import json
import sys
from importlib.metadata import EntryPoint

import pytest

from ragcost import registry
from ragcost.cli.main import main
from ragcost.guards.base import guard_registry


def test_every_kind_is_listed_with_its_built_ins_and_where_they_are_defined(capsys):
    assert main(["backends", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    kinds = {r["kind"]: {e["name"]: e for e in r["entries"]} for r in data["registries"]}
    for kind, name, where in (("index backend", "hnswlib", "ragcost.index.hnsw:HnswlibIndex"),
                              ("stage type", "retrieve", "ragcost.stages.retrieve:Retrieve"),
                              ("embedder", "sentence-transformers", "ragcost.embed.sentence_transformers:"),
                              ("reader", "beir", "ragcost.ingest.readers:"), ("guard check", "grounded", "ragcost.guards."),
                              ("generate backend", "extractive", "ragcost.generate."), ("cache backend", "sql", "ragcost.cache."),
                              ("rerank backend", "hybrid", "ragcost.stages.rerank."), ("router", "knn", "ragcost.stages.route."),
                              ("store (URL scheme)", "duckdb", "ragcost.store.")):
        assert kinds[kind][name]["defined_in"].startswith(where) and kinds[kind][name]["plugin"] is None
    assert "redis" in kinds["cache backend"]  # an optional extra's backend, installed here


@pytest.fixture
def fresh_plugin_module():
    """The plugin module imported afresh by its entry point (so it registers then), and forgotten after."""
    def forget() -> None:
        sys.modules.pop("tests.plugins.good_plugin", None)
        guard_registry.unregister("entry-point-test-check")
    forget()
    yield
    forget()


def test_a_plugin_entry_is_attributed_and_a_broken_one_is_named_with_its_error(entry_points, fresh_plugin_module, capsys):
    entry_points(EntryPoint("good", "tests.plugins.good_plugin", registry.ENTRY_POINT_GROUP),
                 EntryPoint("broken", "tests.plugins.no_such_module_xyz", registry.ENTRY_POINT_GROUP))
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "entry-point-test-check" in ln)
    assert "plugin good (tests.plugins.good_plugin)" in line and "tests.plugins.good_plugin:EntryPointCheck" in line
    assert "plugins that failed to load: 1" in out
    assert "  broken: ModuleNotFoundError" in out
