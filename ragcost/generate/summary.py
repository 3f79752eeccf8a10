"""TTFT, TPOT, end-to-end latency and tokens of the generation attempts of a run (for the CLI and bench)."""

from __future__ import annotations

from typing import Any, Iterable, Optional

from ragcost.cost.aggregate import by_stage_of_calls

_SAMPLES = ("ttft_s", "tpot_s", "e2e_s")


def _ms(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x * 1000, 3)


def timing_summary(calls: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """Per generate stage label: attempts, failures, tokens, and p50/p95 of TTFT, TPOT and e2e (ms).

    ``calls`` are StageCalls; only per-attempt records (those naming their ``operation``) count, and
    only attempts that did not fail give latency samples.
    """
    attempts = ((c.record, c.cost_usd) for c in calls if c.record.operation is not None)
    out: dict[str, dict[str, Any]] = {}
    for stage, agg in by_stage_of_calls(attempts, _SAMPLES).items():
        st: dict[str, Any] = {"attempts": agg.entries, "failed": agg.failures, "input_tokens": agg.input_tokens or 0,
                              "cached_input_tokens": agg.cached_input_tokens, "output_tokens": agg.output_tokens or 0}
        for key in ("ttft", "tpot", "e2e"):
            st[f"{key}_p50_ms"], st[f"{key}_p95_ms"] = (_ms(v) for v in agg.sample_percentiles(f"{key}_s", (50, 95)))
        out[stage] = st
    return out


def summary_line(stage: str, s: dict[str, Any]) -> str:
    def ms(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:.1f} ms"

    cached = "unknown" if s["cached_input_tokens"] is None else str(s["cached_input_tokens"])
    return (f"{stage}: TTFT p50 {ms(s['ttft_p50_ms'])} (p95 {ms(s['ttft_p95_ms'])})  ·  TPOT p50 {ms(s['tpot_p50_ms'])}  ·  "
            f"e2e p50 {ms(s['e2e_p50_ms'])}  ·  tokens in {s['input_tokens']} (cached {cached}) out {s['output_tokens']}  ·  "
            f"attempts {s['attempts']} ({s['failed']} failed)")
