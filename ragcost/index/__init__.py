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
from ragcost.errors import ConfigError
from ragcost.index.base import VectorIndex, index_registry
from ragcost.index.exact import exact_search, rows_for_labels



def check_config(config, precision=None):
    """The index config checked against its backend (kinds, params, precisions); a ConfigError names the fix."""
    if precision is not None and precision != "float32" and config.backend == "hnswlib":
        err = ConfigError(f"embed.precision {precision!r}: hnswlib stores float32 only; "
                          "use an index with backend: faiss for float16/int8/binary")
        err.field = ("backend",)
        raise err
    return config


__all__ = [
    "check_config",
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
