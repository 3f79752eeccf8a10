"""One cached answer: its scope and exact key, the query's normalised text and vector, the answer and its basis."""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np


class BadEntry(ValueError):
    """A stored entry that cannot be trusted: unreadable, incomplete, or its checksum does not match."""

    def __init__(self, entry_id: str, reason: str) -> None:
        super().__init__(f"cache entry {entry_id}: {reason}")
        self.entry_id, self.reason = entry_id, reason


PAYLOAD_FIELDS = ("text", "answer", "citations", "hits")
ROW_FIELDS = ("id", "scope", "key", "created_at", "expires_at", "payload", "checksum")


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
    question: Optional[str] = None  # the question as asked (after a query guard): what the meaning check compares
    strategy: Any = None  # the retrieval strategy the fresh answer reported
    origin: Optional[str] = None  # the ledger's query_id of the miss that wrote it: what a hit avoided is that row's

    def payload(self) -> str:
        body: dict[str, Any] = {"text": self.text, "answer": self.answer, "citations": self.citations, "hits": self.hits,
                                "version": self.version}
        for k in ("question", "strategy", "origin"):  # only when set: an entry written before them keeps its checksum
            if getattr(self, k) is not None:
                body[k] = getattr(self, k)
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str)

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
        """The entry a stored row holds, checked: :class:`BadEntry` when a field is missing or unreadable,
        or when the checksum over id, scope, key, payload and vector does not match (a torn or flipped byte)."""
        entry_id = str(row.get("id") or "?")
        missing = [f for f in ROW_FIELDS if row.get(f) in (None, "")]
        if missing:
            raise BadEntry(entry_id, f"missing {', '.join(missing)}")
        try:
            p = json.loads(row["payload"])
            if not isinstance(p, dict):
                raise ValueError("the payload is not a JSON object")
            gone = [f for f in PAYLOAD_FIELDS if f not in p]
            if gone:
                raise BadEntry(entry_id, f"payload lacks {', '.join(gone)}")
            raw = row.get("vector")
            if raw and len(raw) % 4:
                raise ValueError(f"vector of {len(raw)} bytes is not float32")
            vec = np.frombuffer(raw, dtype=np.float32).copy() if raw else None
            e = cls(scope=str(row["scope"]), key=str(row["key"]), text=p["text"], vector=vec, answer=p["answer"],
                    citations=list(p["citations"]), hits=list(p["hits"]), created_at=float(row["created_at"]),
                    expires_at=float(row["expires_at"]), cost=float(row.get("cost") or 0.0),
                    hit_count=int(row.get("hit_count") or 0), version=p.get("version", ""), id=entry_id,
                    question=p.get("question"), strategy=p.get("strategy"), origin=p.get("origin"))
            if not (math.isfinite(e.created_at) and math.isfinite(e.expires_at)):
                raise BadEntry(entry_id, f"created_at {e.created_at} / expires_at {e.expires_at} is not a finite time")
        except BadEntry:
            raise
        except (TypeError, ValueError, KeyError, AttributeError, UnicodeDecodeError) as err:
            raise BadEntry(entry_id, f"unreadable ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from None
        if e.checksum() != row["checksum"]:
            raise BadEntry(entry_id, "checksum mismatch")
        return e
