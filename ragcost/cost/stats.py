"""The one percentile function: numpy's ``method="linear"`` over latency samples."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np

PERCENTILE_METHOD = "linear"


def percentiles(xs: Iterable[float], qs: Sequence[float] = (50, 95, 99)) -> tuple[Optional[float], ...]:
    """The ``qs`` percentiles of ``xs`` as floats; all None when there are no samples (never a fake 0)."""
    a = np.asarray(xs if isinstance(xs, np.ndarray) else list(xs), dtype=float)
    if a.size == 0:
        return tuple(None for _ in qs)
    return tuple(float(v) for v in np.percentile(a, list(qs), method=PERCENTILE_METHOD))


def percentile(xs: Iterable[float], q: float) -> Optional[float]:
    """One percentile of ``xs``; None when there are no samples."""
    return percentiles(xs, (q,))[0]


def ratio(a: float, b: float) -> Optional[float]:
    """``a / b``, or None when ``b`` is 0 (a figure with no denominator is unknown, not 0 or infinite)."""
    return a / b if b else None
