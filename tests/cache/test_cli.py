"""`ragcost cache stats|clear|prune` over a real pipeline's cache."""

from __future__ import annotations

import json

from tests.cache.conftest import CACHED, pipeline, stages
from tests.cache.test_stage import ask
from tests.cli.conftest import run_cli, write_pipeline


def test_stats_prune_and_clear(kb_folder, capsys):
    pipe = pipeline(kb_folder, stages=CACHED)
    pipe.warm_up()
    pipe.stage("cache").handle.backend.clear()
    ask(pipe)
    ask(pipe, "What are the API rate limits?")
    pipe.close()
    path = kb_folder / "kb.yaml"
    code, out, _ = run_cli(capsys, "cache", "stats", path)
    assert code == 0 and json.loads(out)["live"] == 2
    # no query was recorded in a ledger: no value block, and the note says why
    assert json.loads(out)["value"] is None and "no ledger in" in json.loads(out)["value_note"]
    # another prompt template: the two entries are unreachable from it, and prune removes them
    write_pipeline(kb_folder, stages=stages(sentences=1))
    code, out, _ = run_cli(capsys, "cache", "stats", path)
    assert code == 0 and (json.loads(out)["live"], json.loads(out)["stale"]) == (0, 2)
    code, out, _ = run_cli(capsys, "cache", "prune", path)
    assert code == 0 and out.strip() == "removed 2 stale entries"
    write_pipeline(kb_folder, stages=CACHED)
    code, out, _ = run_cli(capsys, "cache", "clear", path)
    assert code == 0 and out.strip() == "removed 0 entries"


def test_a_pipeline_without_a_cache_stage_is_one_line(kb_folder, capsys, tmp_path):
    path = write_pipeline(tmp_path, stages=[{"type": "retrieve", "k": 3}])
    code, _, err = run_cli(capsys, "cache", "stats", path)
    assert code == 1 and err.strip().startswith("error:") and "no cache stage named 'cache'" in err
