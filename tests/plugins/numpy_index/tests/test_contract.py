"""The plugin's own test: ragcost's index contract, inherited."""

from ragcost.config.index import IndexConfig
from ragcost.testing.index import IndexContract


class TestNumpyExact(IndexContract):
    config = IndexConfig(backend="numpy-exact", kind="flat")
    min_recall = 1.0
