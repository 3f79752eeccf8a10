"""TTFT and throughput of the generate stage against a real vLLM server, beside direct calls to that server.

Needs a GPU machine with vLLM and a small local model (nothing downloads), e.g.:

    python bench/vllm_gpu.py --model /models/Qwen2.5-0.5B-Instruct --requests 64 --concurrency 16
    python bench/vllm_gpu.py --base-url http://127.0.0.1:8000/v1 --served-name my-model   # a server already up

It starts ``vllm serve MODEL`` on 127.0.0.1 unless --base-url is given, then runs the same prompts
(a) directly: one raw streamed request per prompt with httpx, timed as ``vllm bench serve`` does,
(b) through ragcost's ``generate`` stage (backend vllm, same concurrency, same max_tokens),
and prints one JSON object: TTFT/TPOT/e2e percentiles, output tokens/s, requests/s for both,
and the overhead of (b) over (a). Cannot run on a CPU-only machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ragcost.records import UsageRecord
from ragcost.records import Hit, QueryState

PASSAGE = ("Customers can ask for a refund within 30 days of purchase by writing to billing. "
           "Refunds are paid to the original payment method within five business days. ")


def _pcts(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "mean_ms": None}
    a = np.asarray(xs) * 1000
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)),
            "p99_ms": float(np.percentile(a, 99)), "mean_ms": float(a.mean())}


def _states(n: int) -> list[QueryState]:
    hits = [Hit(i, f"doc-{i}", 1.0 / (i + 1), f"Policy {i}", PASSAGE * 3) for i in range(4)]
    return [QueryState(text=f"Question {i}: how long do refunds take?", id=f"q{i}", hits=list(hits)) for i in range(n)]


def _summary(ttft, tpot, e2e, out_tokens, wall, ok, n) -> dict:
    return {"ok": ok, "requests": n, "wall_s": wall, "requests_per_s": ok / wall, "output_tokens_per_s": out_tokens / wall,
            "output_tokens": out_tokens, "ttft": _pcts(ttft), "tpot": _pcts(tpot), "e2e": _pcts(e2e)}


async def direct(base_url: str, model: str, prompts: list[list[dict]], max_tokens: int, concurrency: int) -> dict:
    """Raw streamed chat requests, the reference: no ragcost code on the path."""
    import httpx

    sem = asyncio.Semaphore(concurrency)
    res = []

    async def one(client, messages):
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                "stream_options": {"include_usage": True}, "ignore_eos": True}
        async with sem:
            t0 = time.perf_counter()
            ttft, usage = None, {}
            async with client.stream("POST", f"{base_url}/chat/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data:") or line.endswith("[DONE]"):
                        continue
                    chunk = json.loads(line[5:])
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    if chunk.get("choices") and chunk["choices"][0]["delta"].get("content") and ttft is None:
                        ttft = time.perf_counter() - t0
            e2e = time.perf_counter() - t0
            n = usage.get("completion_tokens", 0)
            res.append((ttft, (e2e - ttft) / (n - 1) if ttft and n > 1 else None, e2e, n))

    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency)) as client:
        await asyncio.gather(*(one(client, m) for m in prompts))
    wall = time.perf_counter() - t0
    return _summary([r[0] for r in res if r[0]], [r[1] for r in res if r[1]], [r[2] for r in res],
                    sum(r[3] for r in res), wall, len(res), len(prompts))


def through_ragcost(base_url: str, model: str, n: int, max_tokens: int, concurrency: int, book) -> tuple[dict, list]:
    from ragcost.stages.generate import Generate

    pipe = SimpleNamespace(resource="gpu-h100", price_book=book, path=Path("bench"))
    params = Generate.Params(backend="vllm", base_url=base_url, model=model, resource="gpu-h100", max_tokens=max_tokens,
                             concurrency=concurrency, extra_body={"ignore_eos": True}, retry={"attempts": 1})
    stage = Generate(params, pipe)
    stage.warm_up()
    batch = _states(n)
    from ragcost.generate.prompt import build_prompt

    prompts = [build_prompt(s.text, s.hits, params).messages() for s in batch]
    rec = UsageRecord(stage="generate", resource="gpu-h100", items=n)
    t0 = time.perf_counter()
    stage.run(batch, rec)
    wall = time.perf_counter() - t0
    recs = [r for s in batch for r in s.usage]  # the attempts, then each query's generate/overhead share
    attempts = [r for r in recs if r.operation is not None]
    ok = [r for r in attempts if not r.failures]
    from ragcost.cost.compute import cost_of

    out = _summary([r.ttft_s for r in ok if r.ttft_s], [r.tpot_s for r in ok if r.tpot_s],
                   [r.e2e_s for r in ok], sum(r.output_tokens or 0 for r in ok), wall, len(ok), n)
    usd = sum(cost_of(r, book) for r in recs)
    out.update(usd=usd, usd_per_request=usd / max(len(ok), 1), busy_s=sum({r.call_id: r.wall_seconds for r in attempts}.values()) if attempts else None)
    return out, prompts


def start_server(model: str, served: str, port: int, extra: list[str]) -> subprocess.Popen:
    exe = shutil.which("vllm")
    cmd = ([exe, "serve", model] if exe else [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model])
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", served, *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    import httpx

    for _ in range(900):  # bounded: 15 minutes
        if proc.poll() is not None:
            raise SystemExit(f"vLLM exited with {proc.returncode}: {' '.join(cmd)}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit("vLLM did not become ready in 15 minutes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="local model folder (started with vllm serve)")
    ap.add_argument("--base-url", help="an already running server, e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--served-name", default="bench-model")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--vllm-arg", action="append", default=[], help="extra argument for vllm serve (repeatable)")
    a = ap.parse_args()
    if not (a.model or a.base_url):
        ap.error("give --model DIR (to start vllm serve) or --base-url of a running server")
    from ragcost.cost.pricebook import default_price_book_path, load_price_book

    book = load_price_book(default_price_book_path())
    proc = None
    if a.base_url:
        base = a.base_url.rstrip("/")
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        t0 = time.perf_counter()
        proc = start_server(a.model, a.served_name, port, a.vllm_arg)
        start_s = time.perf_counter() - t0
        base = f"http://127.0.0.1:{port}/v1"
    try:
        through_ragcost(base, a.served_name, min(a.concurrency, a.requests), 8, a.concurrency, book)  # warm-up
        rag, prompts = through_ragcost(base, a.served_name, a.requests, a.max_tokens, a.concurrency, book)
        raw = asyncio.run(direct(base, a.served_name, prompts, a.max_tokens, a.concurrency))
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGKILL)
    ratio = lambda x, y: None if not x or not y else x / y  # noqa: E731
    print(json.dumps({
        "bench": "vllm_gpu", "model": a.model or a.served_name, "requests": a.requests, "concurrency": a.concurrency,
        "max_tokens": a.max_tokens, "server_start_s": None if proc is None else start_s,
        "machine": {"python": platform.python_version(), "node": platform.node()},
        "direct": raw, "ragcost": rag,
        "ragcost_over_direct": {"ttft_p50": ratio(rag["ttft"]["p50_ms"], raw["ttft"]["p50_ms"]),
                                "output_tokens_per_s": ratio(rag["output_tokens_per_s"], raw["output_tokens_per_s"])},
    }, indent=2))


if __name__ == "__main__":
    main()
