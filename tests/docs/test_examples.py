"""Every example in README.md and docs/ is executed or validated (tests/docs/examples.py says how)."""

from __future__ import annotations

import pytest

from tests.docs.examples import REPO, doc_files, examples, unlabelled_commands

EXAMPLES = examples()


def _id(example) -> str:
    return f"{example.parsed.where}-{example.parsed.language}"


@pytest.mark.parametrize("example", EXAMPLES, ids=[_id(e) for e in EXAMPLES])
def test_the_docs_example_runs_or_validates(example):
    block = example.parsed
    if block.marker == "not-run":
        if not block.argument.strip():
            pytest.fail(f"{block.where}: <!-- not-run: --> needs a reason (why the block cannot run here)")
        pytest.skip(f"not run: {block.argument}")
    example.evaluate()


def test_the_docs_have_examples_of_every_checked_kind():
    """The collector finds blocks at all (a broken lexer would otherwise pass by checking nothing)."""
    langs = {e.parsed.language for e in EXAMPLES}
    assert {"yaml", "bash", "python", "console"} <= langs, langs
    assert any(e.parsed.path == REPO / "README.md" for e in EXAMPLES)


def test_the_readme_stays_short_and_its_pipeline_is_the_committed_quickstart():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150, "the README is at most 150 lines: move the detail into a docs page"
    yaml_blocks = [e.parsed.source for e in EXAMPLES if e.parsed.path == REPO / "README.md" and e.parsed.language == "yaml"]
    quickstart = (REPO / "pipelines" / "quickstart.yaml").read_text(encoding="utf-8")
    assert quickstart in yaml_blocks, "the README shows pipelines/quickstart.yaml as committed: copy the file into it"


def test_the_readme_keeps_the_two_commands_ci_and_the_demo_run():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "\nbash scripts/test.sh\n" in readme and "scripts/test.sh" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert ".venv/bin/ragcost index pipelines/quickstart.yaml && .venv/bin/ragcost query pipelines/quickstart.yaml" in readme


def test_a_block_that_shows_a_command_says_its_language():
    """```console (or ```bash) runs it; a block with no language would hide a command from the checks."""
    found = [hit for path in doc_files() for hit in unlabelled_commands(path)]
    assert not found, "label these blocks ```console or ```bash (and mark them not-run with a reason if they cannot run here):\n" + "\n".join(found)
