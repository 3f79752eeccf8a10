"""Usage records: what one stage call consumed. Cost is computed elsewhere (ragcost.cost.compute)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional


@dataclass
class UsageRecord:
    """One stage call (over a batch of ``items`` queries).

    The runner fills ``wall_seconds``, ``items`` and ``calls``; the stage adds what only it
    knows (tokens, retries, failures, bytes). ``cached_input_tokens`` is ``None`` when the
    server did not say -- unknown, never silently 0.
    """

    stage: str
    resource: str
    wall_seconds: float = 0.0
    items: int = 1
    calls: int = 1
    retries: int = 0
    failures: int = 0
    input_tokens: Optional[int] = None  # uncached input tokens
    cached_input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    bytes: int = 0
    shared_by: Optional[int] = None  # requests that shared this busy time; None = items
    notes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
