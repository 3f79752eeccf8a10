"""One `ragcost serve` against two replicas (and `--workers 2`) on one PostgreSQL ledger and store.

    python -m bench.replicas [--rounds 3] [--seconds 8] [--concurrency 16] [--out bench/out/replicas.json]

The demo chain of ``bench/serve.py`` (300 documents, retrieve k=5, extractive generation), its store
and ledger in a fresh database on ``RAGCOST_TEST_POSTGRES_URL`` (``RAGCOST_BENCH_POSTGRES_URL``).
Three setups are started once, side by side, then measured in turn, interleaved round by round so
that the machine's other load falls on each alike:

- ``one``: one ``ragcost serve`` process;
- ``two_replicas``: two ``ragcost serve`` processes on two ports (``--replica r1``/``r2``), the
  client sending requests to each in turn (what a load balancer does);
- ``workers_2``: one ``ragcost serve --workers 2`` (uvicorn's workers behind one port: one replica).

Each run is closed-loop: ``--concurrency`` clients, each sending ``POST /v1/query`` as soon as its
last answer came, for ``--seconds``; then throughput, p50/p99 latency, 429s, and the servers' CPU
seconds per request (from /proc). The idle p50 is 20 requests one at a time. Ray Serve is measured
too when ``ray.serve`` imports; otherwise the JSON says why not. The client runs on the same
machine and takes CPU from the servers; say so with the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from bench.serve import REPO, WORDS, Server, _corpus, _pct, _pipeline

SETUPS = ("one", "two_replicas", "workers_2")


def _database() -> tuple[str, Any]:
    import sqlalchemy as sa

    base = os.environ.get("RAGCOST_BENCH_POSTGRES_URL") or os.environ.get("RAGCOST_TEST_POSTGRES_URL")
    if not base:
        raise SystemExit("replicas share a PostgreSQL ledger and store: set RAGCOST_TEST_POSTGRES_URL "
                         "(eval \"$(scripts/start_postgres.sh)\") or RAGCOST_BENCH_POSTGRES_URL")
    name = f"rc_bench_replicas_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    return base.rsplit("/", 1)[0] + "/" + name, (admin, name)


def _drop(handle) -> None:
    import sqlalchemy as sa

    admin, name = handle
    with admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _cpu_s(pid: int) -> float:
    """CPU seconds of a process and its children (uvicorn's workers), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            f = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(d.name) == pid or int(f[1]) == pid:
            total += (int(f[11]) + int(f[12])) / tick
    return total


async def closed_loop(urls: list[str], concurrency: int, seconds: float, seed: int) -> dict[str, Any]:
    import httpx

    rng = random.Random(seed)
    lat: list[float] = []
    codes: dict[str, int] = {}
    turn = [0]
    stop_at = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2)
    async with httpx.AsyncClient(timeout=60, limits=limits) as c:
        async def client() -> None:
            while time.perf_counter() < stop_at:
                url = urls[turn[0] % len(urls)]
                turn[0] += 1
                text = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)} question {rng.random():.6f}"
                t0 = time.perf_counter()
                try:
                    r = await c.post(url + "/v1/query", json={"text": text})
                    code = str(r.status_code)
                except httpx.HTTPError as e:
                    code = type(e).__name__
                codes[code] = codes.get(code, 0) + 1
                if code == "200":
                    lat.append(time.perf_counter() - t0)
                elif code == "429":
                    await asyncio.sleep(0.01)  # Retry-After is seconds; a closed loop retries soon instead

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return {"completed": len(lat), "wall_s": round(wall, 2), "throughput_rps": round(len(lat) / wall, 1),
            "p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99), "codes": codes}


async def idle(urls: list[str], n: int = 20) -> Optional[float]:
    import httpx

    lat = []
    async with httpx.AsyncClient(timeout=60) as c:
        for i in range(n):
            t0 = time.perf_counter()
            r = await c.post(urls[i % len(urls)] + "/v1/query", json={"text": f"refund invoice question {i}"})
            if r.status_code == 200:
                lat.append(time.perf_counter() - t0)
    return _pct(lat, 50)


def ray_serve_status() -> str:
    try:
        import ray.serve  # noqa: F401
    except Exception as e:  # an import that fails for a missing dependency says which
        return f"not measured: ray.serve does not import in this environment ({type(e).__name__}: {e})".split("\n")[0]
    return "importable (not measured by this bench)"


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "replicas.json"))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ragcost.cli.main import main as cli

    load_start = list(os.getloadavg())
    url, handle = _database()
    work = Path(tempfile.mkdtemp(prefix="ragcost-bench-replicas-"))
    servers: dict[str, list[Server]] = {}
    try:
        _corpus(work)
        pipe = _pipeline(work, "pg.yaml", {"batch_window_ms": 10, "max_batch": 128})
        cfg = json.loads(pipe.read_text())
        cfg["store"] = url
        pipe.write_text(json.dumps(cfg, indent=2))
        with contextlib.redirect_stdout(sys.stderr):
            if cli(["index", str(pipe)]) != 0:
                raise SystemExit("indexing the bench corpus failed")
        plan = {"one": [("--replica", "one")], "two_replicas": [("--replica", "r1"), ("--replica", "r2")],
                "workers_2": [("--replica", "w2", "--workers", "2")]}
        t0 = time.monotonic()
        with ThreadPoolExecutor(4) as pool:  # cold starts side by side: minutes each on a loaded machine
            started = {k: [pool.submit(Server, pipe, url, a) for a in v] for k, v in plan.items()}
            servers = {k: [f.result() for f in fs] for k, fs in started.items()}
        startup_s = round(time.monotonic() - t0, 1)
        runs: dict[str, list[dict]] = {k: [] for k in SETUPS}
        idle_p50 = {k: asyncio.run(idle([s.url for s in servers[k]])) for k in SETUPS}
        for rnd in range(args.rounds):
            order = SETUPS if rnd % 2 == 0 else tuple(reversed(SETUPS))
            for k in order:
                pids = [s.proc.pid for s in servers[k]]
                cpu0, la0 = sum(_cpu_s(p) for p in pids), os.getloadavg()[0]
                r = asyncio.run(closed_loop([s.url for s in servers[k]], args.concurrency, args.seconds, seed=rnd))
                cpu = sum(_cpu_s(p) for p in pids) - cpu0
                r.update(round=rnd, server_cpu_s=round(cpu, 2), load_avg_1m=round(la0, 2),
                         server_cpu_ms_per_request=round(1000 * cpu / r["completed"], 2) if r["completed"] else None)
                runs[k].append(r)
                print(f"round {rnd} {k}: {r['throughput_rps']} rps p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms", file=sys.stderr)
    finally:
        for group in servers.values():
            for s in group:
                with contextlib.suppress(Exception):
                    s.stop()
        _drop(handle)

    def summary(k: str) -> dict[str, Any]:
        rs = runs[k]
        tp = [r["throughput_rps"] for r in rs]
        return {"throughput_rps": tp, "throughput_rps_range": [min(tp), max(tp)],
                "p50_ms": [r["p50_ms"] for r in rs], "p99_ms": [r["p99_ms"] for r in rs],
                "server_cpu_ms_per_request": [r["server_cpu_ms_per_request"] for r in rs], "idle_p50_ms": idle_p50[k]}

    one = [r["throughput_rps"] for r in runs["one"]]
    ratios = {k: [round(r["throughput_rps"] / o, 2) if o else None for r, o in zip(runs[k], one)] for k in SETUPS[1:]}
    result = {
        "bench": "replicas", "cpu_count": os.cpu_count(), "load_avg_at_start": load_start,
        "load_avg_at_end": list(os.getloadavg()), "generate": "extractive", "corpus_docs": 300,
        "concurrency": args.concurrency, "seconds_per_run": args.seconds, "rounds": args.rounds, "startup_s": startup_s,
        "setups": {k: summary(k) for k in SETUPS}, "throughput_vs_one_same_round": ratios,
        "ray_serve": ray_serve_status(), "runs": runs,
        "note": "client, servers, PostgreSQL and other users share the machine's cores; ratios are within a round",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
