"""The DocumentStore protocol: documents, chunks, vectors and typed metadata of one collection.

A store is chosen by the URL's scheme (``store_registry``, keyed by SQLAlchemy's backend name:
``duckdb:///...`` and ``postgresql+psycopg://...`` both open :class:`ragcost.store.sql.SQLStore`).
A second engine registers a class under its scheme, is built as ``cls(url, collection, fields)``,
and passes ``ragcost.testing.store``.
"""

from __future__ import annotations

import hashlib
import json
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


def content_hash(doc: SourceDocument) -> str:
    """sha256 of the document's title, text and metadata as canonical JSON."""
    payload = {"title": doc.title, "text": doc.text, "metadata": doc.metadata}
    canon = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    # surrogatepass: hashing never fails; a lone surrogate is refused, in one line, when the store writes it
    return hashlib.sha256(canon.encode("utf-8", "surrogatepass")).hexdigest()


@runtime_checkable
class DocumentStore(Protocol):
    """One collection: exactly what indexing, retrieval, re-ranking and evaluation use.

    Writes and deletes are per batch of documents, all or nothing. Labels are int64, assigned by
    the store, ascending, and never reused after a delete. Every failure is a one-line
    ``StoreError`` or ``FilterError`` naming the field or value and the fix.
    """

    def open(self) -> "DocumentStore":
        """Connect, create what is missing, add newly declared fields; a changed field type is refused."""
    def close(self) -> None: ...
    def get_meta(self, key: str) -> Optional[str]: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def doc_hashes(self) -> dict[str, str]:
        """Every stored document id and its content hash."""
    def write(self, docs: list[DocumentRecord]) -> None:
        """Replace these documents (row, chunks, metadata) in one transaction."""
    def delete(self, doc_ids: Iterable[str]) -> int:
        """Remove documents with their chunks; returns how many documents were removed."""
    def revision(self) -> str:
        """A hash that changes if and only if some document's id or content changes."""
    def count_documents(self) -> int: ...
    def count_chunks(self) -> int: ...
    def vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """All labels (int64, ascending) and their vectors, one (n, d) float32 array."""
    def vectors_for(self, labels: Iterable[int]) -> dict[int, np.ndarray]:
        """Vectors of these labels; unknown labels are absent."""
    def chunk_column(self, name: str) -> tuple[np.ndarray, list[Any]]:
        """All labels (ascending) and one chunk column of theirs (``doc_id``, ``text``, ``chunk_no`` ...)."""
    def chunks(self, labels: Iterable[int]) -> list[dict]:
        """Chunks with their document's title and metadata, in ``labels`` order; unknown labels dropped."""
    def matching_labels(self, expr: Any) -> np.ndarray:
        """Sorted int64 labels of the chunks whose document matches a metadata filter (``store/filters.py``)."""


store_registry: Registry[type] = Registry("store (URL scheme)")
