"""Vector indexes: the VectorIndex protocol, its self-describing backends, exact search, artifacts."""

# Importing the backend modules registers "faiss", "hnswlib" and "pgvector"; each imports its library lazily.
from ragcost.index import faiss_index, hnsw, pgvector_index  # noqa: F401
from ragcost.index.artifact import (
    LoadedIndex,
    build_index,
    open_artifact,
    read_manifest,
    timed_build,
    write_artifact,
)
from ragcost.index.base import FilteredResult, KindSpec, VectorIndex, index_registry
from ragcost.index.check import backend_class, build_params, check_config, load_index_file, search_params
from ragcost.index.exact import exact_search, rows_for_labels
from ragcost.index.sharded import ShardedIndex, index_class, new_index
from ragcost.index.manifest import Manifest, check_fingerprint, fingerprint_changes
from ragcost.index.verify import verify_artifact

__all__ = [
    "FilteredResult",
    "KindSpec",
    "LoadedIndex",
    "Manifest",
    "ShardedIndex",
    "VectorIndex",
    "backend_class",
    "build_index",
    "build_params",
    "check_config",
    "load_index_file",
    "new_index",
    "check_fingerprint",
    "exact_search",
    "fingerprint_changes",
    "index_class",
    "index_registry",
    "open_artifact",
    "read_manifest",
    "rows_for_labels",
    "search_params",
    "timed_build",
    "verify_artifact",
    "write_artifact",
]
