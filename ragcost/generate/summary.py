"""TTFT, TPOT, end-to-end latency and tokens of the generation attempts of a run (for the CLI and bench)."""

from __future__ import annotations

from typing import Any, Iterable, Optional

import numpy as np


def _pct_ms(xs: list[float], q: float) -> Optional[float]:
    return round(float(np.percentile(xs, q)) * 1000, 3) if xs else None


def timing_summary(calls: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """Per generate stage label: attempts, failures, tokens, and p50/p95 of TTFT, TPOT and e2e (ms).

    ``calls`` are StageCalls; only per-attempt records (those with an ``e2e_s`` note) count.
    """
    out: dict[str, dict[str, Any]] = {}
    for c in calls:
        r = c.record
        if "e2e_s" not in r.notes:
            continue
        st = out.setdefault(r.stage, {"attempts": 0, "failed": 0, "input_tokens": 0, "cached_input_tokens": None,
                                      "output_tokens": 0, "_ttft": [], "_tpot": [], "_e2e": []})
        st["attempts"] += 1
        st["failed"] += r.failures
        st["input_tokens"] += r.input_tokens or 0
        st["output_tokens"] += r.output_tokens or 0
        if r.cached_input_tokens is not None:
            st["cached_input_tokens"] = (st["cached_input_tokens"] or 0) + r.cached_input_tokens
        if r.failures == 0:
            for key in ("ttft", "tpot", "e2e"):
                if r.notes.get(f"{key}_s") is not None:
                    st[f"_{key}"].append(r.notes[f"{key}_s"])
    for st in out.values():
        for key in ("ttft", "tpot", "e2e"):
            xs = st.pop(f"_{key}")
            st[f"{key}_p50_ms"], st[f"{key}_p95_ms"] = _pct_ms(xs, 50), _pct_ms(xs, 95)
    return out


def summary_line(stage: str, s: dict[str, Any]) -> str:
    def ms(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:.1f} ms"

    cached = "unknown" if s["cached_input_tokens"] is None else str(s["cached_input_tokens"])
    return (f"{stage}: TTFT p50 {ms(s['ttft_p50_ms'])} (p95 {ms(s['ttft_p95_ms'])})  ·  TPOT p50 {ms(s['tpot_p50_ms'])}  ·  "
            f"e2e p50 {ms(s['e2e_p50_ms'])}  ·  tokens in {s['input_tokens']} (cached {cached}) out {s['output_tokens']}  ·  "
            f"attempts {s['attempts']} ({s['failed']} failed)")
