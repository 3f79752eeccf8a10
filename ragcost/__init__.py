"""ragcost: cost-aware retrieval-augmented generation."""

__version__ = "0.1.0"
