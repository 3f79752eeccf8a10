"""How many threads torch runs a CPU embed with.

``RAGCOST_TORCH_THREADS`` (unset = torch's own default, one per core) sets the intra-op threads of
every encode. A short encode -- one query, a few answer sentences -- runs on ONE thread whatever
that says (``embed.single_thread_chars``): its matrices are too small to split, so a second
thread only adds a wake-up and a join, and under contention the join waits for a core
(``python -m bench.demo_latency --part threads`` measures both on the demo questions).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Sequence

TORCH_THREADS_ENV = "RAGCOST_TORCH_THREADS"


def apply_torch_threads() -> None:
    """Set torch's intra-op threads from ``RAGCOST_TORCH_THREADS`` when it is set (a positive integer)."""
    value = os.environ.get(TORCH_THREADS_ENV, "").strip()
    if not value:
        return
    from ragcost.errors import ConfigError

    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{TORCH_THREADS_ENV}={value!r}: give a whole number of threads >= 1 (e.g. 1), or unset it")
    import torch

    torch.set_num_threads(int(value))


def is_short(texts: Sequence[str], limit_chars: int) -> bool:
    """Whether an encode of ``texts`` is short enough for one thread: fewer than ``limit_chars`` characters in all."""
    if limit_chars <= 0:
        return False
    total = 0
    for t in texts:
        total += len(t)
        if total >= limit_chars:
            return False
    return True


@contextmanager
def one_thread_if_short(texts: Sequence[str], limit_chars: int) -> Iterator[None]:
    """Run the block on one torch intra-op thread when ``texts`` is short; the previous count is restored after.

    The setting is process-wide; ragcost's stage calls run one at a time (``ragcost.runtime.cpu``),
    so no other encode sees it. Setting it costs well under a microsecond."""
    if not is_short(texts, limit_chars):
        yield
        return
    import torch

    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
