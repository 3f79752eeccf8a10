"""A tail rule is part of what made an index: changing it is refused at query time and re-embeds at index time."""

from __future__ import annotations

import pytest

from ragcost.errors import FingerprintError
from ragcost.runtime.pipeline import Pipeline
from tests.cli.conftest import run_cli, write_corpus, write_pipeline


def test_changing_the_tail_rule_is_refused_until_reindexed_and_then_re_embeds(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path, chunking={"size": 16, "overlap": 4, "tail": "none"})
    assert run_cli(capsys, "index", p)[0] == 0
    write_pipeline(tmp_path, chunking={"size": 16, "overlap": 4, "tail": "align", "min_tail": 8})
    pipe = Pipeline.load(p)
    try:
        with pytest.raises(FingerprintError, match=r"chunking.tail: \(none\) -> align\).*ragcost index"):
            pipe.artifact()
    finally:
        pipe.close()
    code, out, _ = run_cli(capsys, "index", p)
    assert code == 0 and "chunk_tail None -> align:8" in out
