"""What one 429 costs: the server's and the client's CPU per refusal, for each HTTP parser.

    python -m bench.serve_refusal [--rounds 3] [--rate 300] [--seconds 10] [--work DIR]

The demo chain (the quickstart index, as ``python -m bench.serve --overload`` builds it) served with
``admission: deadline`` and a deadline no query can meet (2 ms), so admission refuses every request
at its headers: what is measured is the refusal path alone (HTTP parse, admission, the 429 and its
OpenAI error body, metrics). Poisson arrivals at ``--rate`` for ``--seconds`` from the overload
bench's minimal keep-alive client. The server's CPU is read from ``/proc/PID/stat`` before and
after, the client's from ``getrusage``. ``serve.http: httptools`` and ``h11`` alternate round by
round, so the machine's drift falls on both. Prints JSON: per round and the median per parser.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import time
from pathlib import Path

from bench.serve_overload import _open_loop, demo_pipeline, prepare_demo


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_round(pipeline: Path, ledger: str, rate: float, seconds: float) -> dict:
    from bench.serve import Server

    srv = Server(pipeline, ledger)
    try:
        time.sleep(1.0)  # past its start-up work
        s0, c0 = _cpu_s(srv.proc.pid), _own_cpu_s()
        results, _ = asyncio.run(_open_loop(srv.url, rate, seconds))
        s1, c1 = _cpu_s(srv.proc.pid), _own_cpu_s()
    finally:
        srv.stop()
    n = len(results)
    refused = sum(r["status"] == 429 for r in results)
    return {"requests": n, "http_429": refused, "server_cpu_ms_per_request": round((s1 - s0) / n * 1000, 4),
            "client_cpu_ms_per_request": round((c1 - c0) / n * 1000, 4)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=300.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--work", default=None, help="folder for the demo's store and index (kept; reused when present)")
    args = ap.parse_args(argv)
    work, _ = prepare_demo(args.work)  # the quickstart index the refusing servers load
    parsers = ("httptools", "h11")
    pipes = {h: demo_pipeline(work, f"refuse-{h}.yaml", {"admission": "deadline", "deadline_s": 0.002, "http": h})
             for h in parsers}
    out: dict = {"bench": "serve_refusal", "cpu_count": os.cpu_count(), "rate": args.rate, "seconds": args.seconds,
                 "loadavg_start": os.getloadavg()[0], "rounds": {h: [] for h in parsers}}
    for i in range(args.rounds):
        for h in (parsers if i % 2 == 0 else parsers[::-1]):
            out["rounds"][h].append(one_round(pipes[h], f"duckdb:///{work / f'ledger-refuse-{h}.duckdb'}", args.rate,
                                              args.seconds))
    out["median"] = {h: {k: statistics.median(r[k] for r in rs) for k in ("server_cpu_ms_per_request", "client_cpu_ms_per_request")}
                     for h, rs in out["rounds"].items()}
    out["all_refused"] = all(r["http_429"] == r["requests"] for rs in out["rounds"].values() for r in rs)
    out["loadavg_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
