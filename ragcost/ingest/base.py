"""The report readers fill while skipping bad input (what they yield is ragcost.records.SourceDocument)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class IngestReport:
    """Counts and examples of what a read skipped or replaced; printed after `ragcost index`."""

    read: int = 0
    skipped: list[str] = field(default_factory=list)  # "path: reason"
    duplicates: list[str] = field(default_factory=list)  # ids seen more than once (last one wins)

    def skip(self, where: str, reason: str) -> None:
        self.skipped.append(f"{where}: {reason}")
