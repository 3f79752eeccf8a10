"""The example checker fails on a broken block: fixtures in a scratch Markdown file."""

from __future__ import annotations

from pathlib import Path

import pytest
from sybil.example import SybilFailure

from tests.docs.examples import SYBIL, matches, unlabelled_commands


def _examples(tmp_path: Path, text: str):
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    return list(SYBIL.parse(path))


GOOD = """# page

```yaml
name: kb
stages:
  - {type: retrieve, k: 10}
```
"""


def test_a_valid_pipeline_block_passes(tmp_path):
    (ex,) = _examples(tmp_path, GOOD)
    ex.evaluate()


@pytest.mark.parametrize("yaml, message", [
    ("stages:\n  - {type: retrieve, kk: 10}\n", r":5:.*kk"),                       # a stage param that does not exist
    ("stages:\n  - {type: guard, on: query, checks: [pii_redact]}\n", r"pii_redact"),  # the README's old cache snippet
    ("embed: {type: sentence-transformers, precision: float8}\n", r"precision"),
    ("name: kb\nname: kb2\n", r"duplicate|already"),
])
def test_a_broken_pipeline_block_fails_naming_the_line(tmp_path, yaml, message):
    (ex,) = _examples(tmp_path, f"# page\n\n```yaml\n{yaml}```\n")
    with pytest.raises(SybilFailure, match=message):
        ex.evaluate()


@pytest.mark.parametrize("marker, yaml, message", [
    ("<!-- yaml: index -->", "backend: faiss\nkind: ivf_pq\nbuild: {nlist: 16, m: 48, nbitz: 8}\n", "nbitz"),
    ("", "version: '1'\nas_of: 2024-01-01\nqueries_per_month: 10\nresources:\n  cpu: {kind: time, usd_per_hour: -1, source: x}\n",
     "usd_per_hour"),
    ("", "dims: [384]\nprecisions: [float33]\n", "float33"),
    ("<!-- yaml: pipeline lines -->", "embed: {type: onnx}\nembed: {type: no-such-runtime}\n", ":6:.*no-such-runtime"),
])
def test_a_broken_index_price_book_or_eval_block_fails(tmp_path, marker, yaml, message):
    (ex,) = _examples(tmp_path, f"# page\n\n{marker}\n```yaml\n{yaml}```\n")
    with pytest.raises(SybilFailure, match=message):
        ex.evaluate()


def test_a_failing_shell_block_fails_and_a_console_block_compares_its_output(tmp_path):
    bad, good, drift = _examples(tmp_path, "```bash\nfalse\n```\n\n```console\n$ echo hi\nhi\n```\n\n"
                                           "```console\n$ echo hi\nhello\n```\n")
    with pytest.raises(SybilFailure, match="bash exited 1"):
        bad.evaluate()
    good.evaluate()
    with pytest.raises(SybilFailure, match="printed something else"):
        drift.evaluate()


def test_a_console_block_runs_each_command_after_a_blank_line_and_output_may_begin_with_a_dollar(tmp_path):
    (ex,) = _examples(tmp_path, "```console\n$ echo '$ per query'\n$ per query\n\n$ echo two\ntwo\n```\n")
    ex.evaluate()


def test_a_failing_python_block_fails(tmp_path):
    (ex,) = _examples(tmp_path, "```python\nimport ragcost\nragcost.no_such_thing\n```\n")
    with pytest.raises(SybilFailure, match="AttributeError"):
        ex.evaluate()


def test_a_not_run_marker_carries_its_reason_and_other_languages_are_not_examples(tmp_path):
    exs = _examples(tmp_path, "<!-- not-run: needs a GPU -->\n```bash\nnvidia-smi\n```\n\n```text\nfalse\n```\n")
    assert len(exs) == 1 and exs[0].parsed.marker == "not-run" and exs[0].parsed.argument == "needs a GPU"


def test_an_ellipsis_line_matches_any_lines():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "...", "d"], ["a", "b"])
    assert not matches(["a"], ["a", "b"])


def test_a_command_in_a_block_without_a_language_is_found(tmp_path):
    path = tmp_path / "page.md"
    path.write_text("```\nragcost eval x.yaml\n```\n\n```\n$ per query $0.1\n```\n\n```text\n$ ragcost plan\n```\n")
    assert [h.split(": ", 1)[1] for h in unlabelled_commands(path)] == ["ragcost eval x.yaml", "$ ragcost plan"]
