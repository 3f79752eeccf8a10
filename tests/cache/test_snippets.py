"""Every cache snippet the docs show (any docs page, the README, the stage's docstring) loads as a pipeline."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli.conftest import write_pipeline

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```yaml\n(.*?)```", re.S)


def snippets() -> list[tuple[str, str]]:
    import ragcost.stages.cache as stage

    texts = {"README.md": (REPO / "README.md").read_text(), "ragcost/stages/cache.py": stage.__doc__ or ""}
    for page in sorted((REPO / "docs").rglob("*.md")):
        texts[str(page.relative_to(REPO))] = page.read_text()
    out = []
    for where, text in texts.items():
        for i, block in enumerate(BLOCK.findall(text)):
            if re.search(r"type:\s*cache\b", block):
                out.append((f"{where}#{i}", block))
    return out


def test_the_docs_show_cache_snippets():
    """The cache's own docs page and the stage's docstring show one (the README, cut short, may not)."""
    where = {w.split("#")[0] for w, _ in snippets()}
    assert {"docs/tasks/cache.md", "ragcost/stages/cache.py"} <= where, where


@pytest.mark.parametrize("where, block", snippets(), ids=[w for w, _ in snippets()])
def test_a_cache_snippet_loads(where, block, tmp_path):
    from ragcost.config.loader import read_yaml
    from ragcost.runtime.load import load_pipeline

    (tmp_path / "snippet.yaml").write_text(block)
    raw = read_yaml(tmp_path / "snippet.yaml")  # the pipeline loader's YAML (``on:`` is a key, not True)
    stages = raw["stages"] if isinstance(raw, dict) and "stages" in raw else raw
    assert isinstance(stages, list) and any(st.get("type") == "cache" for st in stages), where
    path = write_pipeline(tmp_path, stages=json.loads(json.dumps(stages)))
    load_pipeline(path)  # every stage's params, guard check names and the cache's placement
