"""StageContext: the few things a stage (or guard, or re-ranker) may use -- never the whole pipeline.

``ragcost.runtime.parts.PipelineParts`` implements it for `ragcost query` / `ragcost index`,
and ``ragcost.evaluate.stages.EvalStageContext`` for `ragcost eval` (the index under test, the
eval cache's store). Both implement it explicitly; nothing forwards unknown attributes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ragcost.config.index import IndexConfig
from ragcost.cost.pricebook import PriceBook
from ragcost.embed.base import Embedder
from ragcost.index.artifact import LoadedIndex
from ragcost.store.base import DocumentStore


@runtime_checkable
class StageContext(Protocol):
    """What a stage may read. Heavy parts (store, artifact, embedder) load on first use."""

    @property
    def path(self) -> Path:
        """The pipeline file: names it in messages and rebuild hints."""

    @property
    def base(self) -> Path:
        """The folder relative paths in stage params resolve against (the pipeline file's)."""

    @property
    def resource(self) -> str:
        """The price-book resource a stage runs on unless its params name another."""

    @property
    def dim(self) -> int:
        """The index's dimension (the embedding is truncated to it)."""

    @property
    def index_config(self) -> IndexConfig:
        """The index's backend, kind, build and search parameters."""

    @property
    def index_dir(self) -> Path:
        """Where the index and artifacts derived from the store (BM25) live."""

    @property
    def price_book(self) -> PriceBook: ...

    @property
    def embedder(self) -> Embedder: ...

    def store(self) -> DocumentStore:
        """The open document store (chunks, vectors, metadata filters)."""

    def stage_params(self) -> list[dict[str, Any]]:
        """The pipeline's stages in order, each its type and validated params (defaults filled in) as JSON."""

    def shared(self) -> dict[str, Any]:
        """Objects a stage builds for another stage of this pipeline (a cache's handle, for its cache_write)."""

    def artifact(self) -> LoadedIndex:
        """The built index with its labels and float32 vectors, checked against its fingerprint."""
