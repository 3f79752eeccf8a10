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
    unread: dict[str, list[str]] = field(default_factory=dict)  # a folder's files no reader reads, by suffix
    same_content: list[str] = field(default_factory=list)  # "copy = first": files byte-identical to one read before
    undeclared: dict[str, int] = field(default_factory=dict)  # a file's own metadata field the pipeline does not declare -> files

    def notes(self) -> list[str]:
        """What the read left out on purpose, one line each: unread kinds, same-content copies, undeclared fields."""
        out = []
        if self.unread:
            n = sum(len(v) for v in self.unread.values())
            kinds = ", ".join(f"{len(v)} {k}" for k, v in sorted(self.unread.items(), key=lambda kv: (-len(kv[1]), kv[0])))
            first = [p for v in self.unread.values() for p in v][:3]
            out.append(f"not read: {n} file(s) of a kind no reader reads ({kinds}): {', '.join(first)}"
                       + (" ..." if n > len(first) else ""))
        if self.same_content:
            out.append(f"{len(self.same_content)} file(s) byte-identical to one read before, read once (source.duplicates: "
                       f"keep to read every copy): {', '.join(self.same_content[:3])}" + (" ..." if len(self.same_content) > 3 else ""))
        if self.undeclared:
            most = sorted(self.undeclared.items(), key=lambda kv: (-kv[1], kv[0]))
            names = ", ".join(f"{k} ({v} file(s))" for k, v in most[:8]) + (f" and {len(most) - 8} more" if len(most) > 8 else "")
            out.append(f"metadata the files declare that the pipeline does not, left out: {names}; declare a field under "
                       "metadata: to filter on it")
        return out

    def skip(self, where: str, reason: str) -> None:
        # one report line per skip, whatever a file name or a decoder message holds
        self.skipped.append(f"{where}: {reason}".replace("\r", " ").replace("\n", " "))

    def duplicate_note(self, line: str) -> None:
        self.id_clashes.append(line)

    def first_skipped(self, n: int = 3) -> str:
        """The first ``n`` skip lines joined on one line, with how many more there are."""
        more = len(self.skipped) - n
        return "; ".join(self.skipped[:n]) + (f" (and {more} more)" if more > 0 else "")
