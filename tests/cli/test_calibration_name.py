"""A calibration file's dataset name is text from a file: `query` and `report` print it terminal-safe (issue 39,
item 9: its ESC sequences reached the terminal through `report`, its newline split `query`'s judge line)."""

from __future__ import annotations

import json

from tests.cli.conftest import run_cli, write_corpus, write_pipeline

EVIL = "scifact\x1b[2J\x1b]0;pwned\x07\nsecond line"


def test_the_dataset_name_of_a_calibration_never_reaches_the_terminal_raw(tmp_path, capsys):
    from ragcost.cost.calibration import Calibration, Model, calibration_path, save
    from ragcost.runtime.judge import pipeline_fingerprint
    from ragcost.runtime.pipeline import Pipeline

    write_corpus(tmp_path / "kb.jsonl")
    p = write_pipeline(tmp_path)
    assert run_cli(capsys, "index", p)[0] == 0
    pipe = Pipeline.load(p, judge=False)
    try:
        fp = pipeline_fingerprint(pipe)
    finally:
        pipe.close()
    save(Calibration(Model("isotonic", ["score"], x=[0.0, 1.0], y=[0.1, 0.9]), fp, dataset={"name": EVIL},
                     judged=500, relevant=100), calibration_path(p))
    cfg = json.loads(p.read_text())
    p.write_text(json.dumps({**cfg, "useful": {"judge": "calibrated"}}))

    code, out, err = run_cli(capsys, "query", p, "how do I get a refund?")
    assert code == 0, err
    code, rep, err2 = run_cli(capsys, "report", p)
    assert code == 0, err2
    for text in (out, err, rep, err2):
        assert "\x1b" not in text and "\x07" not in text
    judge_lines = [ln for ln in (out + rep).splitlines() if "calibrated" in ln]
    assert judge_lines and all("second line" in ln for ln in judge_lines if "scifact" in ln)  # one line, not split
    code, js, _ = run_cli(capsys, "query", p, "how do I get a refund?", "--json")
    assert code == 0 and "\x1b" not in js
