"""Admission by deadline under overload: the demo chain at 2x its measured saturation.

    python -m bench.serve --overload [--seconds 60] [--factor 2] [--deadline 10] [--work DIR]

1. Index the demo (pipelines/quickstart.yaml) into ``--work`` (kept, so a second run reuses it).
2. Saturation: a closed loop of ``--clients`` concurrent /v1/query clients for ``--saturation-s``
   seconds against a server with admission by queue only; saturation = completed / s.
3. Overload: Poisson arrivals at ``factor`` x saturation for ``--seconds`` against a server with
   ``admission: deadline`` and ``deadline_s: --deadline``; every request records when it was
   sent, its status, latency and Retry-After.
4. The ledger, read after the server stopped: rows of queries that were cancelled at their
   deadline, and whether any of them was charged (computed past the deadline).

The real wait of a refusal is how long the request admitted just before it took to finish: what
the refused client would have waited had it been admitted. Prints JSON with pass fields.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from bisect import bisect_right
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
QUESTIONS = ["how does with call __exit__?", "what does yield from do?", "how are default arguments evaluated?",
             "what is a generator expression?", "how does the global statement work?", "what does nonlocal do?",
             "how are exceptions chained?", "what is a coroutine?", "how does slicing work?", "what is a decorator?",
             "how do f-strings format values?", "what does the assert statement do?", "how is a class body executed?",
             "what are augmented assignments?", "how does import find modules?", "what does del do?"]


def seed_from_quickstart(work: Path) -> None:
    """Copy the repo's built quickstart store and index (``ragcost index pipelines/quickstart.yaml``) into
    ``work`` when it has none: the index-time sentence vectors take minutes to embed again."""
    import shutil

    store, index = REPO / ".ragcost" / "quickstart.duckdb", REPO / ".ragcost" / "quickstart" / "index"
    if (work / "quickstart.duckdb").exists() or not store.is_file() or not index.is_dir():
        return
    shutil.copy2(store, work / "quickstart.duckdb")
    shutil.copytree(index, work / "index", dirs_exist_ok=True)


def demo_pipeline(work: Path, file: str, serve: dict) -> Path:
    from ragcost.config.base import plain
    from ragcost.config.loader import read_yaml

    cfg = plain(read_yaml(REPO / "pipelines" / "quickstart.yaml"))  # ruamel, as ragcost reads it (`on:` stays a key)
    cfg["index"] = str(REPO / "indexes" / "hnsw-m16.yaml")
    cfg["pricing"] = str(REPO / "pricing" / "default.yaml")
    cfg["store"] = f"duckdb:///{work / 'quickstart.duckdb'}"
    cfg["index_dir"] = str(work / "index")
    cfg["serve"] = {"max_queue": 100_000, **serve}
    p = work / file
    p.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return p


class RawClient:
    """A minimal HTTP/1.1 client over asyncio streams, with a keep-alive pool. On a 2-core machine the
    client shares the CPU with the server: httpx spent enough of it per request to delay the
    requests it sent (and so their measured latency). This one writes one pre-built request and
    reads the status line, the headers and a Content-Length body."""

    def __init__(self, url: str) -> None:
        host, port = url.rsplit("//", 1)[1].split(":")
        self.host, self.port = host, int(port)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def post(self, path: str, payload: dict, tag: Optional[str] = None) -> tuple[int, dict[str, str], bytes]:
        body = json.dumps(payload).encode()
        extra = f"X-Bench-Id: {tag}\r\n" if tag is not None else ""  # lines the request up with the server's probe
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n{extra}"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        for attempt in (0, 1):
            pooled = bool(self.idle) and attempt == 0  # a retry always opens a fresh connection
            reader, writer = self.idle.pop() if pooled else await asyncio.open_connection(self.host, self.port)
            try:
                writer.write(head + body)
                status_line = await reader.readline()
                if not status_line:
                    raise ConnectionResetError("closed before the status line")
                status = int(status_line.split()[1])
                headers: dict[str, str] = {}
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = line.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                data = await reader.readexactly(int(headers.get("content-length", "0")))
            except (ConnectionError, asyncio.IncompleteReadError):
                writer.close()
                if pooled and attempt == 0:  # the server closed an idle keep-alive connection: a fresh one
                    continue
                raise
            if headers.get("connection", "").lower() == "close":
                writer.close()
            else:
                self.idle.append((reader, writer))
            return status, headers, data
        raise ConnectionError("unreachable")

    def close(self) -> None:
        for _, w in self.idle:
            w.close()
        self.idle.clear()


async def _query(client: RawClient, i: int) -> dict[str, Any]:
    body = {"text": f"{random.choice(QUESTIONS)} ({i})"}
    t0 = time.perf_counter()
    out: dict[str, Any] = {"sent": t0, "status": None, "latency": None, "retry_after": None, "error": None, "id": str(i)}
    try:
        status, headers, _ = await client.post("/v1/query", body, str(i))
        out["status"] = status
        if status == 429:
            out["retry_after"] = float(headers.get("retry-after", "nan"))
    except Exception as e:  # a cut connection is data
        out["error"] = f"{type(e).__name__}: {e}"
    out["latency"] = time.perf_counter() - t0
    return out


async def closed_loop(url: str, clients: int, seconds: float) -> dict[str, Any]:
    done: list[dict] = []
    stop = time.perf_counter() + seconds
    c = RawClient(url)

    async def worker(w: int) -> None:
        i = 0
        while time.perf_counter() < stop:
            done.append(await _query(c, w * 100_000 + i))
            i += 1
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    wall = time.perf_counter() - t0
    c.close()
    ok = [r for r in done if r["status"] == 200]
    return {"clients": clients, "completed": len(ok), "wall_s": round(wall, 2), "rps": len(ok) / wall,
            "p50_s": _pct([r["latency"] for r in ok], 50)}


CLIENT_GC: list[tuple[int, float]] = []  # the client's own collections during the open loop: (generation, pause s)


def _client_gc(phase: str, info: dict, _t0: list = [0.0]) -> None:
    if phase == "start":
        _t0[0] = time.perf_counter()
    else:
        CLIENT_GC.append((int(info.get("generation", -1)), time.perf_counter() - _t0[0]))


def client_gc_report() -> dict[str, Any]:
    """The client's pauses: a refusal's measured time includes any collection the client made meanwhile."""
    out: dict[str, Any] = {}
    for g in (0, 1, 2):
        ps = [p * 1000 for gen, p in CLIENT_GC if gen == g]
        out[f"gen{g}"] = {"count": len(ps), "ms_max": round(max(ps, default=0), 2), "ms_sum": round(sum(ps), 1)}
    return out


async def open_loop(url: str, rate: float, seconds: float, seed: int = 0) -> tuple[list[dict], float]:
    import gc

    gc.callbacks.append(_client_gc)
    t0, t1, t2 = gc.get_threshold()
    # No full collection in the client while it measures: one paused it for 48-69 ms (a refusal it was
    # timing then looked that much slower); its young collections stay, and are reported in client_gc.
    gc.set_threshold(t0, t1, 2**31 - 1)
    try:
        return await _open_loop(url, rate, seconds, seed)
    finally:
        gc.set_threshold(t0, t1, t2)
        gc.callbacks.remove(_client_gc)


async def _open_loop(url: str, rate: float, seconds: float, seed: int = 0) -> tuple[list[dict], float]:
    rng = random.Random(seed)
    c = RawClient(url)
    tasks, t0, at, i = [], time.perf_counter(), 0.0, 0
    lag: list[float] = []  # how late the client sent each request (its own loop's delay)
    while at < seconds:
        delay = t0 + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lag.append(max(0.0, -(t0 + at - time.perf_counter())))
        tasks.append(asyncio.create_task(_query(c, i)))
        i += 1
        at += rng.expovariate(rate)
    results = await asyncio.gather(*tasks)
    c.close()
    for r, late in zip(results, lag):
        r["client_lag"] = late
    return list(results), t0


def _pct(xs: list[float], q: float) -> Optional[float]:
    from ragcost.cost.stats import percentile

    v = percentile(xs, q)
    return None if v is None else round(v, 4)


def judge(results: list[dict], deadline: float, saturation: float, seconds: float) -> dict[str, Any]:
    ok = sorted((r for r in results if r["status"] == 200), key=lambda r: r["sent"])
    refused = [r for r in results if r["status"] == 429]
    late_ok = [r for r in ok if r["latency"] > deadline]
    good = [r for r in ok if r["latency"] <= deadline]
    sent_at = [r["sent"] for r in ok]
    ratios = []
    for r in refused:  # the real wait: the request admitted just before this refusal, how long it took
        j = bisect_right(sent_at, r["sent"]) - 1
        if j >= 0 and r["retry_after"] == r["retry_after"]:
            ratios.append(r["retry_after"] / ok[j]["latency"])
    within = [x for x in ratios if 0.5 <= x <= 2.0]
    refusal_ms = [r["latency"] * 1000 for r in refused]
    goodput = len(good) / seconds
    return {
        "requests": len(results), "ok": len(ok), "http_429": len(refused),
        "http_504": sum(r["status"] == 504 for r in results),
        "other_errors": sum(1 for r in results if r["status"] not in (200, 429, 504)),
        "other_errors_by_kind": _kinds(r for r in results if r["status"] not in (200, 429, 504)),
        "ok_past_deadline": len(late_ok), "ok_latency_p50_s": _pct([r["latency"] for r in ok], 50),
        "ok_latency_p99_s": _pct([r["latency"] for r in ok], 99), "ok_latency_max_s": round(max((r["latency"] for r in ok), default=0), 3),
        "refusal_ms_p50": _pct(refusal_ms, 50), "refusal_ms_p99": _pct(refusal_ms, 99),
        "refusal_ms_max": round(max(refusal_ms, default=0), 2),
        "retry_after_over_real_wait_p10": _pct(ratios, 10), "retry_after_over_real_wait_p50": _pct(ratios, 50),
        "retry_after_over_real_wait_p90": _pct(ratios, 90),
        "retry_after_within_2x_share": round(len(within) / len(ratios), 4) if ratios else None,
        "goodput_rps": round(goodput, 3), "goodput_over_saturation": round(goodput / saturation, 3) if saturation else None,
        "client_send_lag_ms_p50": _pct([r.get("client_lag", 0) * 1000 for r in results], 50),
        "client_send_lag_ms_max": round(max((r.get("client_lag", 0) * 1000 for r in results), default=0), 2),
    }


def _kinds(rs) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rs:
        k = str(r["status"]) if r["status"] is not None else (r["error"] or "?").split(":")[0]
        out[k] = out.get(k, 0) + 1
    return out


def ledger_check(url: str) -> dict[str, Any]:
    from ragcost.cost.ledger import Ledger

    with Ledger(url, read_only=True) as led:
        qrows, _ = led.read()
    cancelled = [q for q in qrows if q["error"] == "deadline exceeded"]
    return {"query_rows": len(qrows), "cancelled_at_deadline": len(cancelled),
            "cancelled_but_charged": sum(1 for q in cancelled if q["cost_usd"] > 0),
            "charged_usd_past_deadline": sum(q["cost_usd"] for q in cancelled)}


def probe_report(results: list[dict], probe: dict) -> dict[str, Any]:
    """Where the refusals' time went: client-side against server-side (first byte in to last byte out), the
    event loop's delay in starting the app, and the GC pauses and loop lags that overlapped the slowest."""
    reqs = probe["requests"]
    refused = [r for r in results if r["status"] == 429 and r["id"] in reqs and reqs[r["id"]]["done"] is not None]
    srv = [(reqs[r["id"]]["done"] - reqs[r["id"]]["rx"]) * 1000 for r in refused]
    start = [(reqs[r["id"]]["called"] - reqs[r["id"]]["rx"]) * 1000 for r in refused]
    lo = min((r["sent"] for r in results), default=0.0)  # the overload window: warm-up and shutdown left out
    hi = max((r["sent"] + (r["latency"] or 0) for r in results), default=0.0)
    probe["gc"] = [g for g in probe["gc"] if lo <= g[0] <= hi]
    probe["lag"] = [x for x in probe["lag"] if lo <= x[0] <= hi]
    gcs, lags = [tuple(g[:3]) for g in probe["gc"]], probe["lag"]
    worst = []
    for r in sorted(refused, key=lambda r: -r["latency"])[:5]:
        q = reqs[r["id"]]
        t0, t1 = r["sent"], r["sent"] + r["latency"]
        worst.append({"client_ms": round(r["latency"] * 1000, 2), "server_ms": round((q["done"] - q["rx"]) * 1000, 2),
                      "to_server_ms": round((q["rx"] - t0) * 1000, 2), "from_server_ms": round((t1 - q["done"]) * 1000, 2),
                      "gc_ms_overlapping": round(sum(p * 1000 for at, _, p in gcs if at < t1 and at + p > t0), 2),
                      "loop_lag_ms_overlapping": round(sum(x * 1000 for at, x in lags if at < t1 and at + x > t0), 2)})
    by_gen: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    for _, g, p, c, thread, _n in probe["gc"]:
        by_gen.setdefault(str(g), []).append(p * 1000)
        cpu[str(g)] = cpu.get(str(g), 0.0) + c * 1000
    return {
        "refusals_probed": len(refused),
        "server_ms_p50": _pct(srv, 50), "server_ms_p99": _pct(srv, 99), "server_ms_max": round(max(srv, default=0), 2),
        "loop_start_ms_p99": _pct(start, 99), "loop_start_ms_max": round(max(start, default=0), 2),
        "gc": {g: {"count": len(ps), "ms_max": round(max(ps), 2), "ms_sum": round(sum(ps), 1), "cpu_ms_sum": round(cpu[g], 1)}
               for g, ps in sorted(by_gen.items())},
        "gc_by_thread": _by_thread(probe["gc"]),
        "gen2_census": probe.get("gen2", [])[-1:],
        "loop_lags_over_5ms": len(lags), "loop_lag_ms_max": round(max((x * 1000 for _, x in lags), default=0), 2),
        "loop_lags_over_20ms": sum(x > 0.02 for _, x in lags),
        "slowest_refusals": worst,
    }


def _by_thread(gcs: list) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for _, g, p, _c, thread, _n in gcs:
        k = f"{thread.split('_')[0]} gen{g}"
        d = out.setdefault(k, {"count": 0, "ms_sum": 0.0})
        d["count"] += 1
        d["ms_sum"] = round(d["ms_sum"] + p * 1000, 1)
    return out


def prepare_demo(work_arg: Optional[str]) -> tuple[Path, Path]:
    """The work folder and the demo pipeline with ``admission: queue``, indexed (incremental: a second run embeds nothing)."""
    import contextlib

    from ragcost.cli.main import main as cli

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(work_arg or (REPO / ".ragcost" / "bench-serve-overload"))
    work.mkdir(parents=True, exist_ok=True)
    seed_from_quickstart(work)
    base = demo_pipeline(work, "demo.yaml", {"admission": "queue", "deadline_s": 300})
    with contextlib.redirect_stdout(sys.stderr):
        if cli(["index", str(base)]) != 0:
            raise SystemExit("indexing the demo failed")
    return work, base


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    import argparse

    from bench.serve import Server

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overload", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=60.0, help="seconds of overload arrivals")
    ap.add_argument("--factor", type=float, default=2.0, help="offered load as a multiple of the measured saturation")
    ap.add_argument("--deadline", type=float, default=10.0, help="serve.deadline_s of the overloaded server")
    ap.add_argument("--clients", type=int, default=128, help="closed-loop clients that measure saturation "
                    "(twice serve.max_batch: a batch is always waiting when one ends, so the worker never idles)")
    ap.add_argument("--saturation-s", type=float, default=20.0)
    ap.add_argument("--saturation", type=float, default=None, help="skip the measurement: use this req/s")
    ap.add_argument("--serve", action="append", default=[], metavar="FIELD=VALUE",
                    help="a serve: field for the overloaded server (YAML value), e.g. --serve gil_switch_ms=5")
    ap.add_argument("--work", default=None, help="folder for the demo's store and index (kept; reused when present)")
    ap.add_argument("--probe", action="store_true", help="run the overloaded server under bench/serve_probe.py: server-side "
                    "time to each 429, GC pauses and event-loop lag, lined up with the client's refusals")
    args = ap.parse_args(argv)
    work, base = prepare_demo(args.work)
    import gc

    gc.collect()
    gc.freeze()  # the client's own collections would delay its requests (and so their measured latency)
    out: dict[str, Any] = {"bench": "serve-overload", "cpu_count": os.cpu_count(), "loadavg_start": os.getloadavg()[0],
                           "deadline_s": args.deadline, "factor": args.factor, "seconds": args.seconds}
    if args.saturation is None:
        srv = Server(base, f"duckdb:///{work / 'ledger-saturation.duckdb'}")
        try:
            asyncio.run(closed_loop(srv.url, 8, 3.0))  # warm the path
            sat = asyncio.run(closed_loop(srv.url, args.clients, args.saturation_s))
        finally:
            srv.stop()
        out["saturation"] = sat
        saturation = sat["rps"]
    else:
        saturation = args.saturation
    out["saturation_rps"] = round(saturation, 3)
    led = work / "ledger-overload.duckdb"
    if led.exists():
        led.unlink()
    import yaml

    extra = {k: yaml.safe_load(v) for k, v in (x.split("=", 1) for x in args.serve)}
    tight = demo_pipeline(work, "overload.yaml", {"admission": "deadline", "deadline_s": args.deadline, **extra})
    out["serve_fields"] = extra
    probe_file = work / f"probe-{time.strftime('%H%M%S')}.json"
    srv = Server(tight, f"duckdb:///{led}", *(("bench.serve_probe", {"RAGCOST_PROBE_OUT": str(probe_file)}) if args.probe else ()))
    try:
        asyncio.run(closed_loop(srv.url, 1, 1.0))  # one request first: a measured service rate
        results, _ = asyncio.run(open_loop(srv.url, args.factor * saturation, args.seconds))
    finally:
        out["server_exit_code"] = srv.stop()
    if args.probe:
        out["probe"] = {"file": str(probe_file), **probe_report(results, json.loads(probe_file.read_text(encoding="utf-8")))}
    out["offered_rps"] = round(args.factor * saturation, 3)
    out["client_gc"] = client_gc_report()
    out["overload"] = judge(results, args.deadline, saturation, args.seconds)
    out["ledger"] = ledger_check(f"duckdb:///{led}")
    o = out["overload"]
    out["loadavg_end"] = os.getloadavg()[0]
    out["pass_no_compute_past_deadline"] = o["ok_past_deadline"] == 0 and out["ledger"]["cancelled_but_charged"] == 0
    out["pass_refusal_within_50ms"] = o["http_429"] > 0 and o["refusal_ms_max"] <= 50
    out["pass_retry_after_within_2x"] = bool(o["retry_after_within_2x_share"] is not None and o["retry_after_within_2x_share"] >= 0.9)
    out["pass_goodput_90pct"] = bool(o["goodput_over_saturation"] and o["goodput_over_saturation"] >= 0.9)
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
