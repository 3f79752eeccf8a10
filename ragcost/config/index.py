"""Index configuration: backend and kind by name, with build parameters kept apart from search parameters.

This model only carries the YAML. Which backends and kinds exist, and which parameters each kind
takes, the backends declare themselves; ``ragcost.index.check_config`` checks a config against
them (the pipeline loader calls it). The config layer never imports the index layer.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Optional

from pydantic import Field

from ragcost.config.base import Strict
from ragcost.errors import ConfigError


class IndexConfig(Strict):
    """One vector index. ``build`` makes the artifact; ``search`` can change per query or sweep."""

    backend: str = Field("hnswlib", description="index backend: a name in the index registry (hnswlib, faiss, a plugin's)")
    kind: str = Field("hnsw", description="index structure the backend offers (flat, hnsw, ivf_flat, ivf_pq, ...)")
    build: dict[str, Any] = Field(default_factory=dict, description="build parameters for this kind")
    search: dict[str, Any] = Field(default_factory=dict, description="search parameters for this kind")
    device: Literal["cpu", "gpu"] = Field("cpu", description="gpu uses faiss-gpu when installed")
    threads: int = Field(0, ge=0, description="threads for build and batch search; 0 = all cores")

    # Transitional, for callers not yet moved to ragcost.index.build_params/search_params
    # (evaluate/spec.py, bench/overhead.py): remove both once they have moved.
    def build_params(self) -> Any:
        return _resolve("build_params")(self)

    def search_params(self, **overrides: Any) -> Any:
        return _resolve("search_params")(self, **overrides)


# Installed by ragcost.index on import, so that the transitional methods above work without the
# config layer importing the index layer.
PARAM_ACCESSORS: dict[str, Callable[..., Any]] = {}


def _resolve(name: str) -> Callable[..., Any]:
    fn: Optional[Callable[..., Any]] = PARAM_ACCESSORS.get(name)
    if fn is None:
        raise ConfigError(f"IndexConfig.{name}: import ragcost.index first, or call ragcost.index.{name}(config)")
    return fn
