"""What an answer looks like on the wire for ``/v1/query``: a blocked answer's text never leaves."""

from __future__ import annotations

import json
from typing import Any

from ragcost.runtime.api import Answer


def blocked(a: Answer) -> bool:
    return a.outcome == "blocked"


def public_json(a: Answer) -> dict[str, Any]:
    """The answer as /v1/query returns it: a blocked answer's text (and what it cited) never leaves."""
    out = a.to_json()
    if blocked(a):
        out["answer"], out["citations"] = None, []
    return out


def public_bytes(a: Answer) -> bytes:
    """``public_json(a)`` encoded as Starlette's JSONResponse encodes it."""
    return json.dumps(public_json(a), ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode("utf-8")
