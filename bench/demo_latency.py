"""The demo query's latency, measured exactly as issue 25's must-hold states; prints JSON.

``python -m bench.demo_latency [--part p50|threads|all] [--runs N]``

1. **p50**: runs ``ragcost query pipelines/quickstart.yaml --queries bench/data/demo_questions.txt
   --batch-size 1 --json --no-ledger`` as a subprocess (a warm process: the models load before the
   first query and no query is charged for it) and reads each query's ``latency_ms`` (the wall
   seconds of the stage calls that served it) from its JSON: the p50 over the 20 questions against
   the 100 ms target. Beside it, in the same minute, the same command on a copy of the pipeline
   with ``embed.single_thread_chars: 0`` (every encode on torch's threads, as before the option),
   alternating ``--runs`` times, so the default is compared with the old behaviour under the same
   load. Each run's command wall, CPU-seconds (the child's user+sys) and the load average are kept.
2. **threads**: in this process, the demo's embedder encodes each demo question alone, 4 and 16
   questions at once, and 8, 32 and 64 chunk-length texts, on 1 thread and on torch's default
   (every core), alternating: wall and process CPU-seconds per encode, and the load average. This
   is what ``single_thread_chars`` is chosen from.

Needs the quickstart index (``ragcost index pipelines/quickstart.yaml``, run from the repo root).
The machine may be shared: the load average is recorded next to every wall-clock figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "bench" / "data" / "demo_questions.txt"
QUICKSTART = ROOT / "pipelines" / "quickstart.yaml"
TARGET_P50_MS = 100.0


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _pct(xs: list[float], q: float) -> Optional[float]:
    from ragcost.cost.stats import percentile

    v = percentile(xs, q)
    return None if v is None else round(v, 3)


def _variant(folder: Path, updates: dict[str, Any]) -> Path:
    """The quickstart pipeline with ``embed`` ``updates``, over the same store and index (paths made absolute)."""
    from ragcost.config.base import plain
    from ragcost.config.loader import read_yaml

    cfg = plain(read_yaml(QUICKSTART))
    cfg["index"] = str((QUICKSTART.parent / cfg["index"]).resolve())
    cfg["pricing"] = str((QUICKSTART.parent / cfg["pricing"]).resolve())
    cfg["embed"] = {**cfg["embed"], **updates}
    p = folder / "quickstart.yaml"
    p.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return p


def run_command(pipeline: Path, label: str) -> dict[str, Any]:
    """The must-hold command on ``pipeline`` in a child process: per-query latency from its JSON."""
    cmd = [sys.executable, "-m", "ragcost.cli.main", "query", str(pipeline), "--queries", str(QUESTIONS),
           "--batch-size", "1", "--json", "--no-ledger"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0, t0 = _load(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    res = json.loads(proc.stdout)
    lat = [q["latency_ms"] for q in res["queries"]]
    stages = {s["stage"]: round(s["p50_ms"], 3) for s in res["stages"] if s["calls"]}
    return {"variant": label, "queries": len(lat), "p50_ms": _pct(lat, 50), "p95_ms": _pct(lat, 95),
            "max_ms": round(max(lat), 3), "stage_p50_ms": stages,
            "command_wall_s": round(wall, 2),
            "command_cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
            "loadavg_before": load0, "loadavg_after": _load()}


def part_p50(runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"command": "ragcost query pipelines/quickstart.yaml --queries bench/data/demo_questions.txt "
                                      "--batch-size 1 --json --no-ledger", "runs": []}
    with tempfile.TemporaryDirectory(prefix="ragcost-demo-latency-") as tmp:
        old = _variant(Path(tmp), {"single_thread_chars": 0})
        for i in range(runs):
            order = [("default", QUICKSTART), ("single_thread_chars_0", old)]
            for label, p in (order if i % 2 == 0 else order[::-1]):
                out["runs"].append(run_command(p, label))
    by = {lab: [r["p50_ms"] for r in out["runs"] if r["variant"] == lab] for lab in ("default", "single_thread_chars_0")}
    out["p50_ms"] = statistics.median(by["default"])
    out["p50_ms_single_thread_chars_0"] = statistics.median(by["single_thread_chars_0"])
    out["target_p50_ms"] = TARGET_P50_MS
    out["pass_p50"] = out["p50_ms"] <= TARGET_P50_MS
    return out


def part_threads(reps: int = 3) -> dict[str, Any]:
    """Wall and CPU of one encode on 1 thread and on torch's default, alternating, for a few sizes."""
    import torch

    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(QUICKSTART)
    try:
        emb = pipe.embedder
        emb.warm_up()
        model = emb.model
        qs = [x.strip() for x in QUESTIONS.read_text(encoding="utf-8").splitlines() if x.strip()]
        chunks = [c["text"] for c in pipe.store().chunks(range(64))]
        default = torch.get_num_threads()
        sizes = {"1 question": [[q] for q in qs], "4 questions": [qs[i:i + 4] for i in range(0, 16, 4)],
                 "16 questions": [qs[:16]]}
        if chunks:
            sizes.update({"8 chunks": [chunks[:8]], "32 chunks": [chunks[:32]], "64 chunks": [chunks[:64]]})

        def encode(texts: list[str], threads: int) -> tuple[float, float]:
            torch.set_num_threads(threads)
            w0, c0 = time.perf_counter(), time.process_time()
            model.encode(texts, batch_size=emb.config.batch_size, normalize_embeddings=True, show_progress_bar=False)
            return time.perf_counter() - w0, time.process_time() - c0

        encode(qs[:4], 1), encode(qs[:4], default)  # warm both pool sizes
        rows = []
        for name, groups in sizes.items():
            got: dict[int, list[tuple[float, float]]] = {1: [], default: []}
            load0 = _load()
            for r in range(reps if len(groups) > 1 else reps * 2):
                for g in groups:
                    for th in ((1, default) if r % 2 == 0 else (default, 1)):
                        got[th].append(encode(g, th))
            chars = statistics.median(sum(len(t) for t in g) for g in groups)
            row: dict[str, Any] = {"encode": name, "chars": chars, "loadavg": [load0, _load()]}
            for th, xs in got.items():
                row[f"threads_{th}"] = {"wall_ms_median": round(1000 * statistics.median(w for w, _ in xs), 2),
                                        "cpu_ms_median": round(1000 * statistics.median(c for _, c in xs), 2)}
            row["wall_ratio_1_over_default"] = round(row["threads_1"]["wall_ms_median"] / row[f"threads_{default}"]["wall_ms_median"], 3)
            rows.append(row)
        torch.set_num_threads(default)
        return {"torch_default_threads": default, "single_thread_chars_default": emb.config.single_thread_chars, "encodes": rows}
    finally:
        pipe.close()


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["p50", "threads", "all"], default="p50")
    ap.add_argument("--runs", type=int, default=1, help="runs of the command per variant (alternating)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out: dict[str, Any] = {"bench": "demo_latency", "cpu_count": os.cpu_count(), "loadavg_start": _load()}
    if args.part in ("p50", "all"):
        out["p50"] = part_p50(args.runs)
    if args.part in ("threads", "all"):
        out["threads"] = part_threads()
    out["loadavg_end"] = _load()
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
