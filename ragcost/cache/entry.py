"""One cached answer: its scope and exact key, the query's normalised text and vector, the answer and its basis."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np


@dataclass
class CacheEntry:
    scope: str
    key: str
    text: str  # normalised (and redacted, when a PII guard ran first)
    vector: Optional[np.ndarray]
    answer: str
    citations: list[str]
    hits: list[dict[str, Any]]  # [{label, doc_id, score}], best first: the answer's basis
    created_at: float
    expires_at: float
    cost: float = 0.0  # what a miss on this entry cost (its value per hit, for eviction)
    hit_count: int = 0
    version: str = ""  # digest of the pipeline versions it was made under: `ragcost cache prune` drops the others
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def payload(self) -> str:
        return json.dumps({"text": self.text, "answer": self.answer, "citations": self.citations, "hits": self.hits,
                           "version": self.version},
                          ensure_ascii=False, separators=(",", ":"))

    def vector_bytes(self) -> bytes:
        return b"" if self.vector is None else np.asarray(self.vector, dtype=np.float32).tobytes()

    def checksum(self) -> str:
        """Over everything stored, so a torn write would be detected (it cannot happen: one transaction each)."""
        h = hashlib.sha256()
        for part in (self.id, self.scope, self.key, self.payload()):
            h.update(part.encode())
        h.update(self.vector_bytes())
        return h.hexdigest()[:32]

    @property
    def size_bytes(self) -> int:
        return len(self.payload().encode()) + len(self.vector_bytes()) + 160

    @property
    def value(self) -> float:
        """What keeping it is worth: hits × cost saved (a never-hit entry is worth its cost once)."""
        return max(self.hit_count, 1) * self.cost

    @classmethod
    def from_stored(cls, row: dict[str, Any]) -> "CacheEntry":
        p = json.loads(row["payload"])
        vec = np.frombuffer(row["vector"], dtype=np.float32).copy() if row.get("vector") else None
        return cls(scope=row["scope"], key=row["key"], text=p["text"], vector=vec, answer=p["answer"],
                   citations=list(p["citations"]), hits=list(p["hits"]), created_at=float(row["created_at"]),
                   expires_at=float(row["expires_at"]), cost=float(row["cost"]), hit_count=int(row["hit_count"]),
                   version=p.get("version", ""), id=row["id"])
