"""ragcost.atomic.write_files: the one atomic write of a folder of files (index artifacts, BM25)."""

from __future__ import annotations

import os

import pytest

from ragcost.atomic import temp_name, temp_target, write_files


def _text(s):
    return lambda p: p.write_text(s)


def test_files_then_the_commit_file_land_under_their_names(tmp_path):
    write_files(tmp_path, {"a": _text("1"), "b": _text("2")}, commit=("meta", _text("m")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "meta"]
    assert (tmp_path / "meta").read_text() == "m"


def test_the_commit_file_is_renamed_last(tmp_path, monkeypatch):
    seen = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda s, d: seen.append(os.path.basename(d)) or real(s, d))
    write_files(tmp_path, {"a": _text("1"), "b": _text("2")}, commit=("meta", _text("m")))
    assert seen == ["a", "b", "meta"]


def test_a_failing_writer_leaves_no_temp_file_and_no_commit(tmp_path):
    def boom(p):
        p.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_files(tmp_path, {"a": _text("1"), "b": boom}, commit=("meta", _text("m")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_temp_names_are_hidden_and_map_back_to_their_target():
    name = temp_name("manifest.json", "0123456789ab")
    assert name.startswith(".") and temp_target(name) == "manifest.json"
    assert temp_target(".notes.tmp") is None and temp_target("manifest.json") is None
