"""How reports write numbers: dollars whose value no terminal width can change, and JSON that is JSON."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

SIGNIFICANT = 4
MAX_FIXED_DECIMALS = 6  # below $0.001 (4 significant digits need 7+ decimals) a column goes scientific
MAX_FIXED = 1e9


def money_column(values: Sequence[Optional[float]], missing: str = "n/a") -> list[str]:
    """One column of dollars in ONE notation, so the cells compare at a glance.

    Fixed (``$0.001230``) when every value shows ``SIGNIFICANT`` digits within
    ``MAX_FIXED_DECIMALS`` decimals, scientific (``$1.120e-05``) otherwise. None or a
    non-finite value is ``missing``.
    """
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    nonzero = [v for v in finite if v != 0]
    decimals = 2
    if nonzero:
        decimals = max(2, SIGNIFICANT - 1 - math.floor(math.log10(min(nonzero))))
    scientific = decimals > MAX_FIXED_DECIMALS or any(v >= MAX_FIXED for v in finite)

    def one(v: Optional[float]) -> str:
        if v is None or not math.isfinite(v):
            return missing
        return f"${v:.{SIGNIFICANT - 1}e}" if scientific else f"${v:.{decimals}f}"

    return [one(v) for v in values]


def money(value: Optional[float], missing: str = "n/a") -> str:
    """One dollar amount on its own (a column of one)."""
    return money_column([value], missing)[0]


def json_safe(obj: Any) -> Any:
    """``obj`` with every NaN or infinity replaced by None, so ``json.dumps(allow_nan=False)`` succeeds."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
