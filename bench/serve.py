"""Open-loop load against `ragcost serve` on 127.0.0.1: throughput, latency, TTFT, 429s, $ per request.

    python -m bench.serve [--rates 10,20,40,80,160,320] [--tuned-ms 10] [--max-requests 600] [--max-seconds 10]
    python -m bench.serve --overload [--seconds 60] [--factor 2] [--deadline 10]   (bench/serve_overload.py)
    python -m bench.serve --hold [--requests 40]   (bench/serve_hold.py: TTFT cost of a held stream)

Arrivals are Poisson at each offered rate (requests are sent on schedule whether or not earlier ones
have finished: open loop). Each run is bounded in requests and seconds. Every request is a streamed
``/v1/chat/completions`` with ``include_usage`` (TTFT = first content piece; $ from the server's usage,
which equals its ledger rows). Two servers are compared: ``batch_window_ms: 0`` (each request alone)
and the tuned window. Then, on the tuned server: the half-saturation run, and 2,000 requests with 5%
of clients leaving after the first piece, after which the ledger is checked for lost or partial rows.
Prints JSON with pass/fail fields against the issue's targets, and writes an SVG plot (latency
against offered load). Generation is extractive: this measures the serving path, not an LLM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
WORDS = ("refund invoice password login billing export webhook api limit team status cancel subscription "
         "security account data order payment plan upgrade download report email support tenant key").split()


def _corpus(folder: Path, n: int = 300, seed: int = 0) -> Path:
    rng = random.Random(seed)
    path = folder / "docs.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            text = ". ".join(" ".join(rng.choice(WORDS) for _ in range(10)).capitalize() for _ in range(3)) + "."
            f.write(json.dumps({"id": f"d{i}", "title": f"doc {i}", "text": text, "tenant": rng.choice(["acme", "globex"])}) + "\n")
    return path


def _pipeline(folder: Path, file: str, serve: dict) -> Path:
    cfg = {
        "name": "benchserve", "store": f"duckdb:///{folder / 'store.duckdb'}", "index_dir": str(folder / "index"),
        "metadata": {"tenant": "str"}, "source": str(folder / "docs.jsonl"), "chunking": {"size": 64, "overlap": 8},
        "index": {"backend": "hnswlib", "kind": "hnsw", "build": {"M": 16, "ef_construction": 100}, "search": {"ef": 64}},
        "pricing": str(REPO / "pricing" / "default.yaml"),
        "stages": [{"type": "retrieve", "k": 5}, {"type": "generate", "backend": "extractive"}],
        "serve": {"max_queue": 4096, "deadline_s": 60, **serve},
    }
    p = folder / file
    p.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`ragcost serve` in a subprocess on loopback; stopped with SIGTERM (drains, exits 0)."""

    def __init__(self, pipeline: Path, ledger: str, launcher: str = "ragcost.cli.main", env: Optional[dict] = None,
                 args: tuple[str, ...] = ()) -> None:
        import httpx

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-m", launcher, "serve", str(pipeline), "--port", str(self.port),
                                      "--ledger", ledger, "--log-level", "error", *args], env=env, cwd=REPO)
        end = time.monotonic() + 400  # a loaded 2-core machine: a cold start can take minutes
        while time.monotonic() < end:
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.proc.kill()
        raise RuntimeError("ragcost serve did not become ready in 400 s")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)


async def _one(client, i: int, leave_early: bool) -> dict[str, Any]:
    """One streamed chat request; failures are data, not exceptions."""
    body = {"model": "benchserve", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"{random.choice(WORDS)} {random.choice(WORDS)} question {i}"}]}
    t0 = time.perf_counter()
    out: dict[str, Any] = {"status": None, "latency": None, "ttft": None, "cost": None, "left": leave_early, "error": None}
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            out["status"] = r.status_code
            if r.status_code != 200:
                await r.aread()
                return out
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if ev.get("choices") and ev["choices"][0]["delta"].get("content") and out["ttft"] is None:
                    out["ttft"] = time.perf_counter() - t0
                    if leave_early:
                        return out  # closing the stream drops the connection: the server records the disconnect
                if ev.get("usage"):
                    out["cost"] = ev["usage"]["cost_usd"]
                if ev.get("error"):
                    out["error"] = ev["error"]["message"]
            out["latency"] = time.perf_counter() - t0
    except Exception as e:  # a refused or cut connection: counted, the run goes on
        out["error"] = f"{type(e).__name__}: {e}"
    return out


async def open_loop(url: str, rate: float, max_requests: int, max_seconds: float, leave_share: float = 0.0,
                    seed: int = 0) -> dict[str, Any]:
    """Poisson arrivals at ``rate``/s until ``max_requests`` or ``max_seconds``; waits for those in flight."""
    import httpx

    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=512)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        tasks, t0, next_at, i = [], time.perf_counter(), 0.0, 0
        while i < max_requests and next_at < max_seconds:
            delay = t0 + next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(client, i, rng.random() < leave_share)))
            i += 1
            next_at += rng.expovariate(rate)
        sent_for = time.perf_counter() - t0
        results = await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
    return _summary(rate, results, sent_for, wall)


def _pct(xs: list[float], q: float) -> Optional[float]:
    from ragcost.cost.stats import percentile

    v = percentile(xs, q)
    return None if v is None else round(v * 1000, 2)


def _summary(rate: float, rs: list[dict], sent_for: float, wall: float) -> dict[str, Any]:
    done = [r for r in rs if r["status"] == 200 and r["latency"] is not None and not r["error"]]
    lat = [r["latency"] for r in done]
    costs = [r["cost"] for r in done if r["cost"] is not None]
    return {
        "offered_rps": rate, "requests": len(rs), "completed": len(done), "sent_for_s": round(sent_for, 2),
        "throughput_rps": round(len(done) / wall, 2) if wall else None,
        "p50_ms": _pct(lat, 50), "p95_ms": _pct(lat, 95), "p99_ms": _pct(lat, 99),
        "ttft_p50_ms": _pct([r["ttft"] for r in done if r["ttft"]], 50),
        "ttft_p95_ms": _pct([r["ttft"] for r in done if r["ttft"]], 95),
        "http_429": sum(r["status"] == 429 for r in rs),
        "errors": sum(1 for r in rs if (r["error"] or (r["status"] not in (200, 429))) and not r["left"]),
        "left_early": sum(r["left"] for r in rs),
        "usd_per_request": (sum(costs) / len(costs)) if costs else None,
    }


async def idle_p50(url: str, n: int = 30) -> Optional[float]:
    """Single requests one after another: the idle latency (ms)."""
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        lat = [(await _one(client, i, False))["latency"] for i in range(n)]
    return _pct([x for x in lat if x is not None], 50)


def sweep(pipeline: Path, ledger: str, rates: list[float], args) -> dict[str, Any]:
    srv = Server(pipeline, ledger)
    try:
        idle = asyncio.run(idle_p50(srv.url))
        runs = []
        for rate in rates:
            runs.append(asyncio.run(open_loop(srv.url, rate, args.max_requests, args.max_seconds)))
            # Past saturation more load only queues: stop once throughput falls well short of the offer.
            if runs[-1]["throughput_rps"] is not None and runs[-1]["throughput_rps"] < 0.6 * rate:
                break
        return {"idle_p50_ms": idle, "runs": runs, "saturation_rps": max(r["throughput_rps"] or 0 for r in runs)}
    finally:
        srv.stop()


def ledger_check(ledger_url: str, accepted: int) -> dict[str, Any]:
    """Every accepted request has one query row; each query's cost is the sum of its rows; no orphan rows."""
    from ragcost.cost.ledger import Ledger

    with Ledger(ledger_url, read_only=True) as led:
        qrows, srows = led.read()
    by_q: dict[str, list] = {}
    for r in srows:
        by_q.setdefault(r["query_id"], []).append(r)
    partial = 0
    for q in qrows:
        rows = by_q.get(q["query_id"], [])
        stages = {r["stage"] for r in rows}
        whole = abs(q["cost_usd"] - sum(r["cost_usd"] for r in rows)) <= 1e-12 + 1e-9 * q["cost_usd"]
        if not whole or (q["ok"] and not {"embed", "retrieve", "generate", "storage"} <= stages):
            partial += 1
    return {"query_rows": len(qrows), "accepted": accepted, "lost": max(0, accepted - len(qrows)), "partial": partial,
            "disconnect_rows": sum(q["error"] == "client disconnected" for q in qrows),
            "orphan_stage_rows": len(set(by_q) - {q["query_id"] for q in qrows})}


def svg_plot(series: dict[str, list[dict]], path: Path) -> None:
    """p95 latency against offered load, one line per window: a plain SVG, no plotting library."""
    w, h, m = 640, 400, 60
    pts = [(r["offered_rps"], r["p95_ms"]) for rs in series.values() for r in rs if r["p95_ms"] is not None]
    if not pts:
        return
    xmax, ymax = max(x for x, _ in pts) * 1.05, max(y for _, y in pts) * 1.1
    sx = lambda x: m + x / xmax * (w - 2 * m)  # noqa: E731
    sy = lambda y: h - m - y / ymax * (h - 2 * m)  # noqa: E731
    colours = ["#d62728", "#1f77b4", "#2ca02c"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
             f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
             f'<text x="{w / 2}" y="{h - 15}" text-anchor="middle">offered load (requests/s)</text>',
             f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" text-anchor="middle">p95 latency (ms)</text>']
    for i in range(5):
        xv, yv = xmax * i / 4, ymax * i / 4
        parts.append(f'<text x="{sx(xv):.0f}" y="{h - m + 16}" text-anchor="middle">{xv:.0f}</text>')
        parts.append(f'<text x="{m - 6}" y="{sy(yv) + 4:.0f}" text-anchor="end">{yv:.0f}</text>')
    for n, (label, rs) in enumerate(series.items()):
        c = colours[n % len(colours)]
        xy = [(sx(r["offered_rps"]), sy(r["p95_ms"])) for r in rs if r["p95_ms"] is not None]
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in xy)}"/>')
        parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{c}"/>' for x, y in xy]
        parts.append(f'<text x="{w - m - 150}" y="{m + 16 * n}" fill="{c}">{label}</text>')
    parts.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    if "--overload" in (sys.argv[1:] if argv is None else argv):  # admission by deadline at 2x saturation
        from bench.serve_overload import main as overload

        return overload(argv)
    if "--hold" in (sys.argv[1:] if argv is None else argv):  # TTFT cost of holding a stream for a blocking guard
        from bench.serve_hold import main as hold

        return hold(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="10,20,40,80,160,320", help="offered loads, requests/s, ascending")
    ap.add_argument("--tuned-ms", type=float, default=10.0, help="the tuned serve.batch_window_ms")
    ap.add_argument("--max-batch", type=int, default=128)
    ap.add_argument("--max-requests", type=int, default=600, help="requests per rate at most")
    ap.add_argument("--max-seconds", type=float, default=10.0, help="seconds of arrivals per rate at most")
    ap.add_argument("--disconnect-requests", type=int, default=2000)
    ap.add_argument("--plot", default=str(REPO / "bench" / "out" / "serve.svg"))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rates = [float(x) for x in args.rates.split(",")]
    from ragcost.cli.main import main as cli

    work = Path(tempfile.mkdtemp(prefix="ragcost-bench-serve-"))
    _corpus(work)
    base = _pipeline(work, "w0.yaml", {"batch_window_ms": 0})
    import contextlib

    with contextlib.redirect_stdout(sys.stderr):  # stdout is the JSON only
        code = cli(["index", str(base)])
    if code != 0:
        raise SystemExit("indexing the bench corpus failed")
    tuned = _pipeline(work, "tuned.yaml", {"batch_window_ms": args.tuned_ms, "max_batch": args.max_batch})
    off = sweep(base, f"duckdb:///{work / 'ledger-w0.duckdb'}", rates, args)
    on = sweep(tuned, f"duckdb:///{work / 'ledger-tuned.duckdb'}", rates, args)
    half_rate = round(on["saturation_rps"] / 2, 1)
    srv = Server(tuned, f"duckdb:///{work / 'ledger-half.duckdb'}")
    try:
        half = asyncio.run(open_loop(srv.url, half_rate, args.max_requests, args.max_seconds * 2, seed=1))
    finally:
        srv.stop()
    led = f"duckdb:///{work / 'ledger-disconnect.duckdb'}"
    srv = Server(tuned, led)
    try:
        dis = asyncio.run(open_loop(srv.url, half_rate, args.disconnect_requests, 3600, leave_share=0.05, seed=2))
    finally:
        rc = srv.stop()
    check = ledger_check(led, dis["requests"] - dis["http_429"] - dis["errors"])
    ratio = on["saturation_rps"] / off["saturation_rps"] if off["saturation_rps"] else None
    svg_plot({"batch_window_ms 0": off["runs"], f"batch_window_ms {args.tuned_ms:g}": on["runs"]}, Path(args.plot))
    result = {
        "bench": "serve", "cpu_count": os.cpu_count(), "generate": "extractive", "corpus_docs": 300,
        "window_0": off, f"window_{args.tuned_ms:g}ms": on,
        "saturation_ratio": round(ratio, 2) if ratio else None, "target_saturation_ratio": 2.0,
        "pass_saturation_ratio": bool(ratio and ratio >= 2.0),
        "half_saturation": {**half, "idle_p50_ms": on["idle_p50_ms"],
                            "p95_over_idle_p50": round(half["p95_ms"] / on["idle_p50_ms"], 2) if half["p95_ms"] and on["idle_p50_ms"] else None},
        "pass_half_saturation_p95": bool(half["p95_ms"] and on["idle_p50_ms"] and half["p95_ms"] <= 3 * on["idle_p50_ms"]),
        "disconnects": {**dis, "ledger": check, "server_exit_code": rc},
        "pass_ledger_whole": check["lost"] == 0 and check["partial"] == 0 and check["orphan_stage_rows"] == 0,
        "plot": args.plot,
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
