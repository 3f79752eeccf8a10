"""Version-tied keys: a scope (everything that makes an answer) and, within it, the normalised text.

The scope hashes the embedder fingerprint, the index build and corpus revision, every stage
parameter that changes answers (k, rerank, the generate target and its prompt template), the
effective metadata filter and the tenant. Change any of them and old entries become unreachable:
they are never served, and ``ragcost cache prune`` removes them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional


def canonical(value: Any) -> str:
    """JSON with sorted keys and no spaces: one text per value, whatever the dict order."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def scope_key(versions: dict[str, Any], filter_: Optional[dict], tenant: Optional[str]) -> str:
    """One query's scope: the pipeline's versions, its filter and its tenant (never shared across them)."""
    return digest({"versions": versions, "filter": filter_, "tenant": tenant})[:32]


def exact_key(scope: str, normalised_text: str) -> str:
    return hashlib.sha256(f"{scope}\x00{normalised_text}".encode()).hexdigest()[:40]
