"""`ragcost query --profile`: where a cold query's time goes, phase by phase, checked against a clock outside the process."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time

from tests.cli.conftest import REPO, run_cli

ROW = re.compile(r"^(?P<name>.+?)\s+(?P<wall>\d+\.\d\d)\s+(?P<cpu>\d+\.\d\d)(?:\s+(?P<imports>.*))?$")


def test_the_phases_add_up_to_the_process_seen_from_outside_and_name_what_they_imported(kb, capsys):
    code, _, err = run_cli(capsys, "index", kb)
    assert code == 0, err
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "ragcost.cli.main", "query", str(kb), "how do I get a refund", "--profile"],
                            env=env, cwd=kb.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert proc.returncode == 0, err
    assert "refund" in out.lower()  # the results, as without --profile
    lines = err[err.index("phase "):].splitlines()
    rows = {m["name"].strip(): m for m in map(ROW.match, lines[1:]) if m}
    names = list(rows)
    assert names[0] == "start-up: interpreter, ragcost's CLI" and names[-1] == "total"
    assert {"read the pipeline, price book and store", "warm up embed", "warm up retrieve", "1 query, ledger write included",
            "print the results"} <= set(names)
    phases = [r for n, r in rows.items() if n != "total"]
    total = rows["total"]
    assert abs(sum(float(r["wall"]) for r in phases) - float(total["wall"])) <= 0.01 * len(phases)
    # the process as seen from outside: the phases cover it from its start to the last line; only the exit follows
    print(f"profile total {total['wall']} s of {wall:.2f} s outside the process")
    assert 0.9 * wall <= float(total["wall"]) <= wall + 0.05
    assert float(total["cpu"]) <= cpu + 0.05  # the kernel's count of the process's CPU bounds what the phases saw
    assert "torch (" in (rows["warm up embed"]["imports"] or "")  # the model load is where torch comes in
