"""How many threads torch runs a CPU embed with (``RAGCOST_TORCH_THREADS``; unset = torch's own default)."""

from __future__ import annotations

import os

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
