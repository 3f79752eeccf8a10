"""Index configuration: backend and kind by name, with build parameters kept apart from search parameters.

This model only carries the YAML. Which backends and kinds exist, and which parameters each kind
takes, the backends declare themselves; ``ragcost.index.check_config`` checks a config against
them (the pipeline loader calls it). The config layer never imports the index layer.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ragcost.config.base import Strict


class IndexConfig(Strict):
    """One vector index. ``build`` makes the artifact; ``search`` can change per query or sweep."""

    backend: str = Field("hnswlib", description="index backend: a name in the index registry (hnswlib, faiss, a plugin's)")
    kind: str = Field("hnsw", description="index structure the backend offers (flat, hnsw, ivf_flat, ivf_pq, ...)")
    build: dict[str, Any] = Field(default_factory=dict, description="build parameters for this kind")
    search: dict[str, Any] = Field(default_factory=dict, description="search parameters for this kind")
    device: Literal["cpu", "gpu"] = Field("cpu", description="gpu uses faiss-gpu when installed")
    threads: int = Field(0, ge=0, description="threads for build and batch search; 0 = all cores")
