"""Vector indexes: the VectorIndex protocol, its backends (registered on import), exact search, artifacts."""

from ragcost.index import faiss_index, hnsw  # noqa: F401  (registers "faiss" and "hnswlib"; both import their library lazily)
from ragcost.index.artifact import (
    LoadedIndex,
    Manifest,
    build_index,
    check_fingerprint,
    open_artifact,
    read_manifest,
    write_artifact,
)
from ragcost.index.base import VectorIndex, index_registry
from ragcost.index.exact import exact_search, rows_for_labels

__all__ = [
    "LoadedIndex",
    "Manifest",
    "VectorIndex",
    "build_index",
    "check_fingerprint",
    "exact_search",
    "index_registry",
    "open_artifact",
    "read_manifest",
    "rows_for_labels",
    "write_artifact",
]
