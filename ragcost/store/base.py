"""The DocumentStore protocol: documents, chunks, vectors and typed metadata of one collection.

A store is chosen by the URL's scheme (``store_registry``): ``duckdb:///...`` and
``postgresql+psycopg://...`` both open the SQLAlchemy store. A second engine registers a class
under its scheme and passes ``tests/contracts/store.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Protocol, runtime_checkable

import numpy as np

from ragcost.records import SourceDocument
from ragcost.registry import Registry


@dataclass
class ChunkRecord:
    text: str
    start: int
    end: int
    n_tokens: int
    vector: np.ndarray  # float32, the model's full dimension


@dataclass
class DocumentRecord:
    doc: SourceDocument
    content_hash: str
    chunks: list[ChunkRecord]


@runtime_checkable
class DocumentStore(Protocol):
    """One collection. Writes are per batch of documents, all or nothing."""

    url: str
    collection: str

    def open(self) -> "DocumentStore": ...
    def close(self) -> None: ...
    def get_meta(self, key: str) -> Optional[str]: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def doc_hashes(self) -> dict[str, str]: ...
    def write(self, docs: list[DocumentRecord]) -> None: ...
    def delete(self, doc_ids: Iterable[str]) -> int: ...
    def revision(self) -> str: ...
    def count_documents(self) -> int: ...
    def count_chunks(self) -> int: ...
    def vectors(self) -> tuple[np.ndarray, np.ndarray]: ...
    def vectors_for(self, labels: Iterable[int]) -> dict[int, np.ndarray]: ...
    def chunk_column(self, name: str) -> tuple[np.ndarray, list[Any]]: ...
    def chunks(self, labels: Iterable[int]) -> list[dict]: ...
    def matching_labels(self, expr: Any) -> np.ndarray: ...
    def count_matching(self, expr: Any) -> int: ...


store_registry: Registry[type] = Registry("store (URL scheme)")
