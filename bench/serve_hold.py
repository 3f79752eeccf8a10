"""What holding a stream for a blocking answer guard costs in time to first token, on the demo chain.

    python -m bench.serve --hold [--requests 40] [--work DIR]

Two servers over the same index: the demo's grounded guard with ``policy: flag`` (the stream is
not held: pieces leave as generation makes them) and with ``policy: block`` (held: nothing leaves
until the guard passed). Sequential streamed requests, one at a time, alternating between the
servers so machine load hits both alike; TTFT = first content piece. Prints JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Optional

from bench.serve_overload import QUESTIONS, REPO, _pct, demo_pipeline, seed_from_quickstart


def _with_policy(p: Path, file: str, policy: str) -> Path:
    """The demo with its answer guard under ``policy``, over its own copy of the store (DuckDB: one process a file)."""
    import shutil

    cfg = json.loads(p.read_text(encoding="utf-8"))
    store = p.parent / f"quickstart-{policy}.duckdb"
    shutil.copy2(p.parent / "quickstart.duckdb", store)
    cfg["store"] = f"duckdb:///{store}"
    for st in cfg["stages"]:
        if st.get("type") == "guard" and st.get("on") == "answer":
            st["checks"] = [{**c, "policy": policy} if isinstance(c, dict) else {"check": c, "policy": policy} for c in st["checks"]]
    out = p.with_name(file)
    out.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return out


async def _ttft(url: str, name: str, q: str) -> tuple[Optional[float], float]:
    import httpx

    body = {"model": name, "stream": True, "messages": [{"role": "user", "content": q}]}
    t0 = time.perf_counter()
    first = None
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        async with c.stream("POST", "/v1/chat/completions", json=body) as r:
            async for line in r.aiter_lines():
                if first is None and line.startswith("data: {") and '"content": "' in line and '"content": ""' not in line:
                    first = time.perf_counter() - t0
    return first, time.perf_counter() - t0


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    import argparse

    from bench.serve import Server
    from ragcost.cli.main import main as cli

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--work", default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(args.work or (REPO / ".ragcost" / "bench-serve-overload"))
    work.mkdir(parents=True, exist_ok=True)
    seed_from_quickstart(work)
    base = demo_pipeline(work, "demo.yaml", {"admission": "queue"})
    import contextlib
    import sys

    with contextlib.redirect_stdout(sys.stderr):  # incremental: a second run embeds nothing
        if cli(["index", str(base)]) != 0:
            raise SystemExit("indexing the demo failed")
    servers: dict[str, Server] = {}
    got: dict[str, dict[str, list]] = {p: {"ttft": [], "e2e": []} for p in ("flag", "block")}
    try:
        for policy in got:
            servers[policy] = Server(_with_policy(base, f"hold-{policy}.yaml", policy), f"duckdb:///{work / f'ledger-hold-{policy}.duckdb'}")
        for i in range(args.requests):
            q = QUESTIONS[i % len(QUESTIONS)]
            for policy, srv in (servers.items() if i % 2 == 0 else reversed(list(servers.items()))):
                ttft, e2e = asyncio.run(_ttft(srv.url, "quickstart", q))
                if ttft is not None:
                    got[policy]["ttft"].append(ttft)
                got[policy]["e2e"].append(e2e)
    finally:
        for srv in servers.values():
            srv.stop()
    out: dict[str, Any] = {"bench": "serve-hold", "requests": args.requests, "loadavg": os.getloadavg()[0]}
    for policy, g in got.items():
        out[policy] = {"streamed_held": policy == "block", "ttft_p50_ms": _ms(_pct(g["ttft"], 50)),
                       "ttft_p95_ms": _ms(_pct(g["ttft"], 95)), "e2e_p50_ms": _ms(_pct(g["e2e"], 50)), "answered": len(g["ttft"])}
    f, b = out["flag"]["ttft_p50_ms"], out["block"]["ttft_p50_ms"]
    out["ttft_cost_of_holding_p50_ms"] = round(b - f, 2) if f is not None and b is not None else None
    print(json.dumps(out, indent=2))
    return out


def _ms(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x * 1000, 2)


if __name__ == "__main__":
    main()
