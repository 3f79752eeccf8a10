"""Task, concept and reference pages say what is: no commit hashes, issue or stop numbers, run labels.

Measurements and how they moved live on docs/benchmarks.md (and changes in CHANGELOG.md), so a reader of a
task page is never sent to a history they cannot see. Fenced blocks and code spans that hold more than a
hash are examples (an error line naming a file's hash, a run id in sample output) and are not read.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HISTORY_PAGES = {"docs/benchmarks.md"}  # measurements, run by run; CHANGELOG.md is outside docs/
_HASH = re.compile(r"(?<![\w/.-])([0-9a-f]{7,40})(?![\w/.-])")
_REF = re.compile(r"\b(?:issues?|stops?)\s+#?\d+|(?<![\w&])#\d{2,}\b|\bfc\d{2}\b", re.I)
_SPAN = re.compile(r"`([^`]*)`")


def history_refs(text: str) -> list[tuple[int, str]]:
    """(line, what) for each commit hash or issue/stop reference in the page's prose."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        prose = _SPAN.sub(lambda m: m.group(0) if re.fullmatch(r"[0-9a-f]{7,40}", m.group(1)) else " ", line)
        out += [(n, m.group(1)) for m in _HASH.finditer(prose)
                if re.search(r"[a-f]", m.group(1)) and re.search(r"\d", m.group(1))]
        out += [(n, m.group(0)) for m in _REF.finditer(prose)]
    return out


def _pages() -> list[str]:
    pages = sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md")) + ["README.md"]
    return [p for p in pages if p not in HISTORY_PAGES]


@pytest.mark.parametrize("page", _pages())
def test_the_page_names_no_commit_issue_or_stop(page):
    found = history_refs((REPO / page).read_text(encoding="utf-8"))
    assert not found, f"{page}: history belongs on docs/benchmarks.md or in CHANGELOG.md: " + \
        ", ".join(f"line {n}: {what!r}" for n, what in found)


@pytest.mark.parametrize("text, caught", [
    ("measured at commit 62dedf7 on the box", "62dedf7"),
    ("the old code checked out at `5deecf9`", "5deecf9"),
    ("before issue 40 eval priced", "issue 40"),
    ("as stop 51's CI showed", "stop 51"),
    ("a fresh clone (fc18) passed", "fc18"),
])
def test_the_rule_catches_each_kind(text, caught):
    assert [w for _, w in history_refs(text)] == [caught]


@pytest.mark.parametrize("text", [
    "`error: index/vectors-48c4d605d54342de.npy: the index file is damaged`",  # an example's file name
    "```\nA: dense-flat d384 f32 (run cee4abfe): ndcg@10 0.6600\n```",  # sample output in a fenced block
    "a 2,048-token window at 1e-5 and 384 dims; #1 of 5; HTTP 429",
    "`recent: 0fde8529; 'last' and 'previous' work too`",
])
def test_examples_and_numbers_are_not_history(text):
    assert history_refs(text) == []
