"""Vector indexes: the VectorIndex protocol, its backends (registered on import), exact search, artifacts."""

# Importing the backend modules registers "faiss" and "hnswlib"; each imports its library lazily.
from ragcost.index import faiss_index, hnsw  # noqa: F401
from ragcost.index.artifact import (
    LoadedIndex,
    Manifest,
    build_index,
    check_fingerprint,
    open_artifact,
    read_manifest,
    timed_build,
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
    "timed_build",
    "write_artifact",
]
