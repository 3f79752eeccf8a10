"""The measured-results pages are generated from bench/out/*.json when the site is built: every value of a file,
by its path, and the command that writes it again."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hooks():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import mkdocs_hooks
    finally:
        sys.path.pop(0)
    return mkdocs_hooks


def test_a_page_shows_every_value_by_its_path_and_the_command(hooks):
    page = hooks.measured_page("embed_demo", {"benchmark": "embed", "ragcost": {"texts_per_s": 59.1, "runs": [3.4, 3.5]},
                                              "rows": [{"k": 1}, {"k": 2}], "note": "a|b"})
    assert "`python -m bench.embed`" in page
    for row in ("| `ragcost.texts_per_s` | 59.1 |", "| `ragcost.runs` | 3.4, 3.5 |", "| `rows[1].k` | 2 |", "| `note` | a\\|b |"):
        assert row in page, row


def test_a_long_file_is_cut_with_the_count_of_what_is_left(hooks):
    page = hooks.measured_page("big", {"xs": list(range(hooks.MAX_ROWS + 20 + 13))})
    assert page.count("\n| `xs[") == hooks.MAX_ROWS and "33 more values are in the JSON file." in page


def test_every_file_in_bench_out_gets_a_page_and_a_command_that_exists(hooks):
    pages = hooks.measured_pages()
    stems = sorted(p.stem for p in (REPO / "bench" / "out").glob("*.json"))
    assert sorted(uri[len("measured/"):-3] for uri in pages if uri != "measured/index.md") == stems
    for stem in stems:
        cmd = pages[f"measured/{stem}.md"].split("`python -m bench.", 1)[1].split("`", 1)[0]
        assert (REPO / "bench" / f"{cmd.split()[0]}.py").is_file(), (stem, cmd)
