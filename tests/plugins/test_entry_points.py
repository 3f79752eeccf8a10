"""Backends shipped in other packages register through the ``ragcost.backends`` entry-point group."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from ragcost import registry
from ragcost.errors import UnknownNameError
from ragcost.guards import guard_registry
from ragcost.stages.base import stage_registry




def test_a_plugin_registers_through_its_entry_point(entry_points):
    entry_points(EntryPoint("good", "tests.plugins.good_plugin", registry.ENTRY_POINT_GROUP))
    guard_registry.unregister("entry-point-test-check")
    assert "entry-point-test-check" in guard_registry
    assert guard_registry.get("entry-point-test-check").__name__ == "EntryPointCheck"


def test_a_broken_plugin_is_named_with_its_error_and_the_built_ins_still_work(entry_points, capsys):
    entry_points(EntryPoint("broken", "tests.plugins.no_such_module_xyz", registry.ENTRY_POINT_GROUP))
    with pytest.raises(UnknownNameError, match="installed: .*retrieve"):
        stage_registry.get("no-such-stage")
    err = capsys.readouterr().err
    assert "plugin 'broken'" in err and "tests.plugins.no_such_module_xyz" in err and "ModuleNotFoundError" in err
    assert err.count("\n") == 1, "the warning is one line"
    assert stage_registry.get("retrieve").type == "retrieve"


def test_an_unknown_name_lists_every_installed_one():
    with pytest.raises(UnknownNameError, match=r"unknown guard check 'toxicity'; installed: .*pii.*prompt_injection"):
        guard_registry.get("toxicity")
