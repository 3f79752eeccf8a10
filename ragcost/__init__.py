"""ragcost: cost-aware retrieval-augmented generation."""

import os as _os

__version__ = "0.1.0"

# OpenMP threads (torch's intra-op pool) sleep when idle instead of spinning: measured by
# `python -m bench.cost_attribution --parts c` on the shared 2-core machine, a one-text embed was
# charged 0.484 CPU-s with the default spin and 0.029 with PASSIVE (batch 64: 46 vs 6.2 ms a text).
# Read when OpenMP starts, so it applies only if torch is not imported before ragcost; a value
# the user set wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def __getattr__(name: str):
    # `ragcost.open` without importing the pipeline machinery at `import ragcost`.
    if name == "open":
        from ragcost.runtime.api import open

        return open
    raise AttributeError(f"module 'ragcost' has no attribute {name!r}")
