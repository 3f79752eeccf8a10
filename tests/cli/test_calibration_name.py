"""A calibration file's dataset name is text from a file: `query` and `report` print it terminal-safe (issue 39,
item 9: its ESC sequences reached the terminal through `report`, its newline split `query`'s judge line)."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import run_cli, write_corpus, write_pipeline

EVIL = "scifact\x1b[2J\x1b]0;pwned\x07\nsecond line"


def test_the_dataset_name_of_a_calibration_never_reaches_the_terminal_raw(tmp_path, capsys):
    p = _calibrated(tmp_path, capsys, name=EVIL)

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


def _calibrated(tmp_path, capsys, name: str = "d", **model):
    """An indexed kb pipeline with judge: calibrated and a calibration file written with this model."""
    from ragcost.cost.calibration import Calibration, Model, calibration_path
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
    fp = {**fp, **model.pop("fingerprint", {})}
    cal = Calibration(Model("isotonic", ["score"], x=[0.0, 1.0], y=[0.1, 0.9]), fp, {"name": name}, 500, 100).to_dict()
    cal["model"].update(model)
    calibration_path(p).write_text(json.dumps(cal))
    p.write_text(json.dumps({**json.loads(p.read_text()), "useful": {"judge": "calibrated"}}))
    return p


@pytest.mark.parametrize("model,words", [
    ({"y": [0.9, 0.1]}, "isotonic y must not decrease"),
    ({"kind": "logistic", "features": ["score"], "coef": [True], "mean": [0.5], "scale": [1.0], "intercept": 0.0},
     "finite numbers (not booleans"),
    ({"kind": "logistic", "features": ["score"], "coef": [1.0], "mean": [0.5], "scale": [1.0], "intercept": True},
     "finite numbers (not booleans"),
    ({"fingerprint": {"dim": 192}}, "fit for another configuration (dim: 192 -> 384)"),
])
def test_validate_refuses_a_calibration_query_could_not_use(tmp_path, capsys, model, words):
    """issue 39, item 8: a decreasing isotonic fit, booleans as coefficients and a fit at another dim passed validate."""
    p = _calibrated(tmp_path, capsys, **model)
    code, out, err = run_cli(capsys, "validate", p)
    assert code == 1 and err.count("\n") == 1, (out, err)
    assert words in err, err
