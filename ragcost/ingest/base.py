"""The report readers fill while skipping bad input (what they yield is ragcost.records.SourceDocument)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class IngestReport:
    """Counts and examples of what a read skipped or replaced; printed after `ragcost index`."""

    read: int = 0
    skipped: list[str] = field(default_factory=list)  # "path[:line]: reason"
    duplicates: list[str] = field(default_factory=list)  # ids seen more than once (last one wins)
    id_clashes: list[str] = field(default_factory=list)  # an int id and a string id that became one id
    id_kinds: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)  # id -> (type, where), to find clashes

    def skip(self, where: str, reason: str) -> None:
        # one report line per skip, whatever a file name or a decoder message holds
        self.skipped.append(f"{where}: {reason}".replace("\r", " ").replace("\n", " "))

    def duplicate_note(self, line: str) -> None:
        self.id_clashes.append(line)

    def first_skipped(self, n: int = 3) -> str:
        """The first ``n`` skip lines joined on one line, with how many more there are."""
        more = len(self.skipped) - n
        return "; ".join(self.skipped[:n]) + (f" (and {more} more)" if more > 0 else "")
