"""A sample index backend packaged outside ragcost (tests/plugins/numpy_index, its own pyproject and tests),
installed as pip installs it: listed by `ragcost backends`, passing `ragcost.testing`'s contract, and priced
and planned by what its kind declares (it holds its float32 vectors; its size is the matrix and the labels)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import write_corpus, write_pipeline

PACKAGE = Path(__file__).parent / "numpy_index"
CLI = [sys.executable, "-c", "from ragcost.cli.main import entry; entry()"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """The package pip-installed into a folder of its own; the environment a process needs to see it."""
    root = tmp_path_factory.mktemp("plugin")
    src, site = root / "src", root / "site"
    shutil.copytree(PACKAGE, src)  # pip builds in the source folder: a copy keeps the repository clean
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                        "--target", str(site), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    return {"env": env, "src": str(src), "site": str(site)}


def test_ragcost_backends_lists_it_from_its_entry_point(installed):
    r = subprocess.run([*CLI, "backends", "--json"], env=installed["env"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(r.stdout)
    index = next(reg for reg in data["registries"] if reg["kind"] == "index backend")
    mine = next(e for e in index["entries"] if e["name"] == "numpy-exact")
    assert mine["plugin"] == "numpy_index (ragcost_numpy_index)" and mine["defined_in"].startswith("ragcost_numpy_index")
    assert data["plugin_errors"] == {}


def test_its_own_tests_pass_ragcost_testings_index_contract(installed):
    src = installed["src"]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--rootdir", src,
                        str(Path(src) / "tests")], cwd=src, env=installed["env"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout and "error" not in r.stdout.lower()


def test_plan_prints_the_size_it_declares_and_no_exact_scan_copy(installed):
    args = ["plan", "--chunks", "1000", "--dim", "384", "--backend", "numpy-exact", "--kind", "flat"]
    r = subprocess.run([*CLI, *args], env=installed["env"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    own = 1000 * (384 * 4 + 8)
    assert f"index {own:,} B, by the storage formula" in r.stdout  # its formula; no exact-scan copy added
    r = subprocess.run([*CLI, *args, "--shards", "2"], env=installed["env"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"index {own // 2:,} B" in r.stdout and "the formula backend numpy-exact declares, unchecked here" in r.stdout


def test_a_pipeline_on_it_is_charged_its_own_bytes_and_no_exact_scan_copy(installed, tmp_path):
    write_corpus(tmp_path / "kb.jsonl")
    kb = write_pipeline(tmp_path, index={"backend": "numpy-exact", "kind": "flat"})
    script = ("import json, sys\n"
              "from ragcost.cli.main import main\n"
              "assert main(['index', sys.argv[1]]) == 0\n"
              "from ragcost.runtime.pipeline import Pipeline\n"
              "p = Pipeline.load(sys.argv[1])\n"
              "m = p.artifact().manifest\n"
              "ram, _ = p.storage_bytes()\n"
              "print(json.dumps({'ram': ram, 'index_bytes': m.index_bytes, 'n': m.vector_count, 'dim': m.dim, "
              "'backend': m.backend}))\n")
    r = subprocess.run([sys.executable, "-c", script, str(kb)], env=installed["env"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["backend"] == "numpy-exact" and got["n"] > 0
    assert got["index_bytes"] == got["n"] * (got["dim"] * 4 + 8)  # the matrix and the labels, as loaded
    assert got["ram"] == got["index_bytes"]  # the float32 copy is not charged again: the index holds the vectors
