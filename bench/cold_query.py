"""A cold demo query, wall seconds from the process's start to its exit (issue 42's goal: 3 s, median of 5).

    python -m bench.cold_query [--runs 5] [--pipeline pipelines/quickstart.yaml] > bench/out/cold_query.json

Runs `ragcost index` first (a rerun embeds nothing), then the README's query as separate processes, each
timed outside the process, and `--profile`'s phases of the median run. The machine's speed is the
yardstick loop of docs/index.md, timed in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUESTION = "how does the with statement call __exit__?"
GOAL_S = 3.0


YARDSTICK = "import time\nt = time.perf_counter(); s = 0\nfor i in range(10_000_000): s += i\nprint(round(time.perf_counter() - t, 2))"


def yardstick() -> float:
    """docs/index.md's loop, run as written there (at module level: a function's locals would run it 2x faster)."""
    return float(subprocess.run([sys.executable, "-c", YARDSTICK], capture_output=True, text=True, check=True).stdout)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pipeline", default=str(REPO / "pipelines" / "quickstart.yaml"))
    args = ap.parse_args(argv)
    cli = [sys.executable, "-m", "ragcost.cli.main"]
    subprocess.run([*cli, "index", args.pipeline, "--quiet"], check=True, capture_output=True, cwd=REPO)
    runs, profiles = [], []
    for _ in range(args.runs):
        t = time.perf_counter()
        p = subprocess.run([*cli, "query", args.pipeline, QUESTION, "--profile", "--no-ledger"], capture_output=True,
                           text=True, cwd=REPO)
        runs.append(round(time.perf_counter() - t, 3))
        if p.returncode != 0:
            raise SystemExit(f"ragcost query failed: {p.stderr.strip().splitlines()[-1:]}")
        profiles.append(p.stderr)
    median = statistics.median(runs)
    rows = [ln for ln in profiles[runs.index(sorted(runs)[len(runs) // 2])].splitlines()
            if ln and not ln.startswith("phase") and "  " in ln]
    out = {"pipeline": Path(args.pipeline).name, "question": QUESTION, "runs_s": runs, "median_s": median,
           "goal_s": GOAL_S, "pass": median <= GOAL_S, "yardstick_s": yardstick(), "median_run_profile": rows}
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
