"""`ragcost.testing` ships the contract test classes: a plugin outside this repository inherits them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def test_the_contracts_import_outside_the_repository_and_bring_in_no_tests_package(tmp_path):
    code = textwrap.dedent("""
        import importlib, json, sys
        kinds = ["embedder", "generator", "guard", "index", "reranker", "router", "stage", "store"]
        classes = {k: sorted(n for n, v in vars(importlib.import_module(f"ragcost.testing.{k}")).items()
                             if isinstance(v, type) and n.endswith("Contract")) for k in kinds}
        print(json.dumps({"classes": classes, "tests": sorted(m for m in sys.modules if m == "tests" or m.startswith("tests."))}))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["tests"] == []  # nothing of this repository's tests/ is needed
    assert all(got["classes"][k] for k in got["classes"]), got["classes"]  # a contract class for every kind
    assert "IndexContract" in got["classes"]["index"]


def test_a_plugin_test_module_written_outside_the_repository_passes_the_index_contract(tmp_path):
    """An out-of-tree backend's test file, as a plugin would write it: inherit the contract, name a config."""
    (tmp_path / "test_plugin_contract.py").write_text(textwrap.dedent("""
        from ragcost.config.index import IndexConfig
        from ragcost.testing.index import IndexContract

        class TestFaissFlatFromAPlugin(IndexContract):
            config = IndexConfig(backend="faiss", kind="flat")
    """))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "--rootdir", str(tmp_path), str(tmp_path / "test_plugin_contract.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert " passed" in out.stdout and "failed" not in out.stdout
