"""Facts one module reports and another reads travel in declared fields (QueryState.generation, .strategy,
.matches, .partial, .findings, .decision, .cache_trip, .truncated; UsageRecord.work, .query_tokens, .remote,
.strategies, .model, .operation, .ttft_s, .tpot_s, .e2e_s), never as ``notes[...]`` keys: a notes key is
written and read inside one package (the reports show notes whole, as counters and text)."""

from __future__ import annotations

import collections
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ragcost"
KEYED = [re.compile(r"\bnotes(?:\[|\.get\(|\.setdefault\(|\.pop\()\s*[\"']([A-Za-z_]+)[\"']"),  # notes["k"], notes.get("k")
         re.compile(r"[\"']([A-Za-z_]+)[\"']\s+(?:not\s+)?in\s+[\w.\[\]\"']*notes\b")]  # "k" in rec.notes


def packages_by_key(root: Path) -> dict[str, set[str]]:
    """Each notes key named by subscript, get, setdefault, pop or ``in``: the packages (folders) that name it.
    ``ragcost/testing`` (the contract tests shipped in the package) reads what a backend reports, as a test does."""
    out: dict[str, set[str]] = collections.defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "testing":
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            for pat in KEYED:
                for m in pat.finditer(line):
                    out[m.group(1)].add(str(rel.parent))
    return out


def test_no_notes_key_crosses_a_package_boundary():
    crossing = {k: sorted(v) for k, v in packages_by_key(PACKAGE).items() if len(v) > 1}
    assert crossing == {}


def test_the_rule_catches_a_read_in_another_package(tmp_path):
    root = tmp_path / "ragcost"
    (root / "stages").mkdir(parents=True)
    (root / "runtime").mkdir()
    (root / "stages" / "a.py").write_text('s.notes["generation"] = {}\nusage.notes["rows"] = 1\n')
    (root / "runtime" / "b.py").write_text('g = s.notes.get("generation")\nif "rows" in rec.notes: pass\n')
    assert {k: sorted(v) for k, v in packages_by_key(root).items()} == {"generation": ["runtime", "stages"],
                                                                         "rows": ["runtime", "stages"]}


def test_the_declared_facts_are_shown_under_their_old_names():
    from ragcost.records import QueryState

    s = QueryState(text="q", id="q")
    s.generation, s.strategy, s.matches, s.truncated = {"abstained": True}, "exact", 3, "query is 300 tokens"
    s.notes["mine"] = 1
    assert s.facts() == {"mine": 1, "generation": {"abstained": True}, "strategy": "exact", "matches": 3,
                         "truncated": "query is 300 tokens"}
