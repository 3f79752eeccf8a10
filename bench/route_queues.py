"""Context-length queues, measured: one mixed queue vs per-length queues over two real vLLM servers.

The same two servers and the same arrival schedule of short and long prompts, two ways:

- ``mixed``: every request goes to the next server in turn (one queue, short and long together);
- ``per_length``: ragcost's ``context_length`` router sends short prompts to one server and long
  ones to the other (a queue per window).

Prints one JSON object: per mode, short-request TTFT p50/p95 and e2e, short and overall
requests/s and output tokens/s, and ``pass.short_p95_ttft_per_length_le_mixed``.

On this CPU machine (builds the tiny random-weight Llama the tests use; vLLM CPU venv)::

    RAGCOST_VLLM_VENV=.vllm-venv python -m bench.route_queues --tiny

On a GPU machine, two servers of a real model (started here, or already up)::

    python -m bench.route_queues --model /models/Qwen2.5-1.5B-Instruct --vllm-python $(which python) \\
        --short-words 50 --long-words 5000 --max-model-len 8192 --requests 400 --rate 20 --max-tokens 64
    python -m bench.route_queues --base-urls http://127.0.0.1:8001/v1,http://127.0.0.1:8002/v1 --served-name m ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

WORDS = ("refund billing invoice password account export webhook status team api limit order "
         "customer payment period policy section page settings security minute").split()


def _pcts(xs: list[float]) -> dict[str, Optional[float]]:
    if not xs:
        return {"p50_ms": None, "p95_ms": None}
    a = np.asarray(xs) * 1000
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95))}


def workload(n: int, long_share: float, short_words: int, long_words: int, rate: float, seed: int) -> list[dict]:
    """Requests with arrival times (Poisson at ``rate``/s), a share of them long."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        long_ = rng.random() < long_share
        words = [rng.choice(WORDS) for _ in range(long_words if long_ else short_words)]
        out.append({"i": i, "at": t, "long": long_, "text": " ".join(words)})
    return out


def per_length_targets(reqs: list[dict], boundary: int, max_tokens: int) -> list[int]:
    """Server index per request, decided by ragcost's context_length router (0: short queue, 1: long)."""
    from ragcost.records import QueryState
    from ragcost.stages.route.context_length import ContextLength

    router = ContextLength(ContextLength.Params(output_tokens=max_tokens, buckets=[
        {"max_tokens": boundary, "target": "short"}, {"target": "long"}]), None)
    decisions = router.decide([QueryState(text=r["text"]) for r in reqs])
    return [0 if d.target == "short" else 1 for d in decisions]


async def _one(client, url: str, model: str, text: str, max_tokens: int) -> dict:
    body = {"model": model, "prompt": text, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    t0 = time.perf_counter()
    ttft, usage, err = None, {}, None
    try:
        async with client.stream("POST", f"{url}/completions", json=body) as r:
            if r.status_code != 200:
                err = f"HTTP {r.status_code}"
            async for line in r.aiter_lines():
                if not line.startswith("data:") or line.endswith("[DONE]"):
                    continue
                chunk = json.loads(line[5:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if chunk.get("choices") and chunk["choices"][0].get("text") and ttft is None:
                    ttft = time.perf_counter() - t0
    except Exception as e:  # a failed request is data, not a crash
        err = f"{type(e).__name__}: {e}"
    return {"ttft": ttft, "e2e": time.perf_counter() - t0, "out": usage.get("completion_tokens", 0), "error": err}


async def run_mode(reqs: list[dict], targets: list[int], urls: list[str], model: str, max_tokens: int) -> dict:
    import httpx

    async with httpx.AsyncClient(timeout=httpx.Timeout(600, connect=10), limits=httpx.Limits(max_connections=1024)) as client:
        t0 = time.perf_counter()

        async def timed(r, k):
            await asyncio.sleep(max(0.0, r["at"] - (time.perf_counter() - t0)))
            return {**await _one(client, urls[k], model, r["text"], max_tokens), "long": r["long"]}

        res = await asyncio.gather(*(timed(r, k) for r, k in zip(reqs, targets)))
        wall = time.perf_counter() - t0
    short = [x for x in res if not x["long"] and not x["error"]]
    ok = [x for x in res if not x["error"]]
    return {"requests": len(res), "failed": len(res) - len(ok), "wall_s": wall,
            "short": {"n": len(short), "ttft": _pcts([x["ttft"] for x in short if x["ttft"] is not None]),
                      "e2e": _pcts([x["e2e"] for x in short]), "requests_per_s": len(short) / wall,
                      "output_tokens_per_s": sum(x["out"] for x in short) / wall},
            "all": {"requests_per_s": len(ok) / wall, "output_tokens_per_s": sum(x["out"] for x in ok) / wall},
            "errors": sorted({x["error"] for x in res if x["error"]})[:5]}


def _start_servers(args, folder: Path):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.vllm_server import VllmServer, build_tiny_model

    model = build_tiny_model(folder / "tiny") if args.tiny else Path(args.model)

    class Server(VllmServer):
        def command(self):
            cmd = super().command()
            cmd[cmd.index("--max-model-len") + 1] = str(args.max_model_len)
            cmd[cmd.index("--served-model-name") + 1] = args.served_name
            cmd[cmd.index("--dtype") + 1] = "float32" if args.tiny else "auto"
            return cmd

    python = Path(args.vllm_python) if args.vllm_python else None
    servers = [Server(model, folder / f"server{i}.log", python=python) for i in range(2)]
    import threading

    threads = [threading.Thread(target=s.start) for s in servers]  # both at once: each start takes minutes on CPU
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in servers:
        if s.start_seconds is None:
            for x in servers:
                x.kill()
            raise SystemExit(f"a vLLM server did not start; log:\n{s.log_tail()}")
    return servers


def main(argv: Optional[list[str]] = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="build the tests' tiny random-weight Llama and serve it (CPU)")
    ap.add_argument("--model", help="local model folder to serve (GPU)")
    ap.add_argument("--vllm-python", help="python of the vLLM install (default: RAGCOST_VLLM_VENV/bin/python)")
    ap.add_argument("--base-urls", help="two servers already up: URL_A,URL_B (each ending in /v1)")
    ap.add_argument("--served-name", default="tiny-llama")
    ap.add_argument("--max-model-len", type=int, default=256)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--long-share", type=float, default=0.25)
    ap.add_argument("--short-words", type=int, default=3, help="words of a short prompt (the tiny model's tokenizer makes ~4.5 tokens a word)")
    ap.add_argument("--long-words", type=int, default=40, help="words of a long prompt (~180 tokens of the tiny model; ~1.3 a word in a real vocabulary)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rate", type=float, default=4.0, help="arrivals per second (Poisson)")
    ap.add_argument("--boundary", type=int, default=None, help="prompt tokens of the short queue (default: halfway)")
    ap.add_argument("--repeats", type=int, default=2, help="each mode this many times, alternating; medians reported")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not (args.tiny or args.model or args.base_urls):
        ap.error("give --tiny (CPU), --model DIR or --base-urls URL_A,URL_B")
    reqs = workload(args.requests, args.long_share, args.short_words, args.long_words, args.rate, args.seed)
    boundary = args.boundary or _halfway(reqs, args.max_tokens)
    per_length = per_length_targets(reqs, boundary, args.max_tokens)
    mixed = [i % 2 for i in range(len(reqs))]
    servers = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.base_urls:
            urls = args.base_urls.split(",")
        else:
            servers = _start_servers(args, Path(tmp))
            urls = [s.base_url for s in servers]
        try:
            asyncio.run(run_mode(reqs[:4], mixed[:4], urls, args.served_name, args.max_tokens))  # warm both servers
            runs: dict[str, list[dict]] = {"mixed": [], "per_length": []}
            for rep in range(args.repeats):
                for mode in (("mixed", "per_length") if rep % 2 == 0 else ("per_length", "mixed")):
                    targets = mixed if mode == "mixed" else per_length
                    runs[mode].append(asyncio.run(run_mode(reqs, targets, urls, args.served_name, args.max_tokens)))
        finally:
            for s in servers:
                s.kill()
    med = lambda mode, *path: float(np.median([_get(r, path) for r in runs[mode]]))  # noqa: E731
    out = {"benchmark": "route_queues",
           "config": {k: getattr(args, k) for k in ("requests", "long_share", "short_words", "long_words", "max_tokens",
                                                     "rate", "repeats", "max_model_len")} | {"boundary": boundary, "urls": urls},
           "routed_short_queue": sum(1 for t in per_length if t == 0), "routed_long_queue": sum(1 for t in per_length if t == 1),
           "runs": runs}
    for mode in runs:
        out[mode] = {"short_ttft_p50_ms": med(mode, "short", "ttft", "p50_ms"), "short_ttft_p95_ms": med(mode, "short", "ttft", "p95_ms"),
                     "short_e2e_p95_ms": med(mode, "short", "e2e", "p95_ms"),
                     "short_requests_per_s": med(mode, "short", "requests_per_s"),
                     "all_output_tokens_per_s": med(mode, "all", "output_tokens_per_s"),
                     "failed": sum(r["failed"] for r in runs[mode])}
    out["pass"] = {"short_p95_ttft_per_length_le_mixed": out["per_length"]["short_ttft_p95_ms"] <= out["mixed"]["short_ttft_p95_ms"]}
    print(json.dumps(out, indent=2))
    return out


def _halfway(reqs: list[dict], max_tokens: int) -> int:
    """The prompt-token bound between the short and the long prompts, as the router counts tokens."""
    from ragcost.generate.prompt import approx_tokens

    short = max((approx_tokens(r["text"]) for r in reqs if not r["long"]), default=0)
    long_ = min((approx_tokens(r["text"]) for r in reqs if r["long"]), default=short + 2)
    return (short + long_) // 2 + max_tokens


def _get(d: dict, path) -> float:
    for k in path:
        d = d[k]
    return float("nan") if d is None else d


if __name__ == "__main__":
    main()
