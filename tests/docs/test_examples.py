"""Every example in README.md and docs/ is executed or validated (tests/docs/examples.py says how)."""

from __future__ import annotations

import pytest

from tests.docs.examples import REPO, examples

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
