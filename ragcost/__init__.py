"""ragcost: cost-aware retrieval-augmented generation."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `ragcost.open` without importing the pipeline machinery at `import ragcost`.
    if name == "open":
        from ragcost.runtime.api import open

        return open
    raise AttributeError(f"module 'ragcost' has no attribute {name!r}")
