"""A batch `ragcost query --queries` process measured from outside: its lifetime and its charged CPU; prints JSON.

``python -m bench.batch_process [--queries 55] [--runs 3]``

Copies ``docs/examples/kb.yaml``'s corpus into a temporary folder, indexes it, then runs the CLI as a subprocess
over ``--queries`` questions ``--runs`` times. Per run: the wall clock around the subprocess and the lifetime the
ledger recorded for it (process start to exit), and the CPU the ledger charged (every stage call, the start-up
row and the tail after the last query, summed over distinct calls) against the process's own CPU from the kernel
(``wait4``: user + system). The issue's targets: lifetime within 1% of the wall clock, charged ÷ process CPU in
0.97-1.03.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = ["how do I get a refund", "reset my password", "export my data", "webhook signature", "billing cycle"]


def one_run(folder: Path, pipe: Path, qfile: Path) -> dict:
    from ragcost.cost.ledger import Ledger

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "ragcost.cli.main", "query", str(pipe), "--queries", str(qfile),
                             "--json"], env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(err.decode()[-2000:])
    with Ledger(f"duckdb:///{folder / 'kb.duckdb'}", read_only=True) as led:
        run = [r for r in led.list_runs() if r["kind"] == "query"][-1]
        life = next(x for x in led.read_lifetimes() if x["run_id"] == run["run_id"])
        _, srows = led.read()
    cpu = {r["call_id"]: r["cpu_seconds"] for r in srows if r["run_id"] == run["run_id"] and r["cpu_seconds"] is not None}
    held = (life["stopped_at"] - life["started_at"]).total_seconds()
    process_cpu = usage.ru_utime + usage.ru_stime
    return {"wall_s": round(wall, 3), "lifetime_s": round(held, 3), "lifetime_vs_wall": round(held / wall, 4),
            "startup_s": round((life["ready_at"] - life["started_at"]).total_seconds(), 3),
            "shutdown_s": round((life["stopped_at"] - life["stopping_at"]).total_seconds(), 3),
            "charged_cpu_s": round(sum(cpu.values()), 3), "process_cpu_s": round(process_cpu, 3),
            "charged_vs_process": round(sum(cpu.values()) / process_cpu, 4), "load_avg_1m": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=55)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from ragcost.cli.main import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shutil.copy(REPO / "docs" / "examples" / "kb.jsonl", folder / "kb.jsonl")
        cfg = (REPO / "docs" / "examples" / "kb.yaml").read_text()
        pipe = folder / "kb.yaml"
        pipe.write_text(cfg.replace("../../", str(REPO) + "/").replace("duckdb:///.ragcost/", f"duckdb:///{folder}/"))
        os.chdir(folder)  # the CLI runs there too: relative paths in the pipeline mean the same for both
        if cli(["index", str(pipe)]) != 0:
            raise SystemExit("index failed")
        qfile = folder / "q.jsonl"
        qfile.write_text("".join(json.dumps({"_id": f"q{i}", "text": QUESTIONS[i % len(QUESTIONS)]}) + "\n"
                                 for i in range(args.queries)))
        runs = [one_run(folder, pipe, qfile) for _ in range(args.runs)]
    print(json.dumps({"queries": args.queries, "runs": runs,
                      "median_lifetime_vs_wall": statistics.median(r["lifetime_vs_wall"] for r in runs),
                      "median_charged_vs_process": statistics.median(r["charged_vs_process"] for r in runs)}, indent=1))


if __name__ == "__main__":
    main()
