"""Precision and recall of the PII and prompt-injection guards on their labelled sets; prints JSON.

    python -m bench.pii_eval            # from the repository root

Compares, in the same run, against the checksum-free baseline (the same patterns without Luhn,
mod-97 and check-digit validation), so what the validators buy shows as precision.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ragcost.guards import pii
from ragcost.guards.injection import is_injection

DATA = Path(__file__).resolve().parents[1] / "tests" / "guards" / "data"


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def pii_eval(cases: list[dict]) -> dict:
    t0 = time.perf_counter()
    result = pii.score_detector(cases)
    result["seconds"] = round(time.perf_counter() - t0, 4)
    result["errors"] = len(result["errors"])
    saved = dict(pii.PATTERNS)
    try:  # baseline: no checksum validation
        for name in ("iban", "credit_card", "cnpj", "cpf"):
            pii.PATTERNS[name] = (saved[name][0], None)
        base = pii.score_detector(cases)
    finally:
        pii.PATTERNS.update(saved)
    result["baseline_without_checksums"] = {k: base[k] for k in ("precision", "recall", "tp", "fp", "fn")}
    return result


def injection_eval(cases: list[dict], threshold: float = 0.5) -> dict:
    pred = [(c["injection"], is_injection(c["text"], threshold)) for c in cases]
    tp = sum(1 for y, p in pred if y and p)
    fp = sum(1 for y, p in pred if not y and p)
    fn = sum(1 for y, p in pred if y and not p)
    return {"precision": round(tp / (tp + fp), 4) if tp + fp else 1.0, "recall": round(tp / (tp + fn), 4) if tp + fn else 1.0,
            "tp": tp, "fp": fp, "fn": fn, "n": len(cases), "threshold": threshold}


def main() -> int:
    pii_cases, inj_cases = load("pii.jsonl"), load("injection.jsonl")
    out = {"pii": {"cases": len(pii_cases), **pii_eval(pii_cases)}, "prompt_injection": injection_eval(inj_cases)}
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
