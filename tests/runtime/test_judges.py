"""The useful-document judge is checked at load against what the pipeline's scores can be."""

from __future__ import annotations

import pytest

from ragcost.errors import ConfigError
from ragcost.runtime.load import load_pipeline
from tests.cli.conftest import write_pipeline


@pytest.mark.parametrize("stages, useful, match", [
    ([{"type": "retrieve"}, {"type": "rerank", "backend": "hybrid"}], {"threshold": 0.5},
     r"useful.threshold 0.5 can never be reached: the last scoring stage 'rerank:hybrid' gives RRF \(rrf_k 60\) scores of at most 0.03279"),
    ([{"type": "retrieve"}], {"threshold": 1.5}, r"useful.threshold 1.5 can never be reached: .*'retrieve' .*at most 1"),
    ([{"type": "retrieve"}], {"threshold": -1.0}, r"useful.threshold -1 counts every document as useful"),
    ([{"type": "retrieve"}], {"judge": "cited"}, r"useful.judge: cited .* no generate stage"),
])
def test_a_judge_that_cannot_work_is_refused_with_file_line(tmp_path, stages, useful, match):
    p = write_pipeline(tmp_path, stages=stages, useful=useful)
    with pytest.raises(ConfigError, match=match) as e:
        load_pipeline(p)
    assert str(e.value).startswith(f"{p}:") and "ragcost eval" in str(e.value) or "generate" in str(e.value)


@pytest.mark.parametrize("stages, useful", [
    ([{"type": "retrieve"}, {"type": "rerank", "backend": "hybrid"}], {"threshold": 0.03}),
    ([{"type": "retrieve"}, {"type": "generate"}], {"judge": "cited"}),
    ([{"type": "retrieve"}, {"type": "rerank", "backend": "cross-encoder", "model": "x"}], {"threshold": 3.0}),
    ([{"type": "retrieve"}], {"threshold": 0.5}),
])
def test_a_judge_that_can_fire_loads(tmp_path, stages, useful):
    load_pipeline(write_pipeline(tmp_path, stages=stages, useful=useful))


def test_eval_can_load_the_pipeline_whose_threshold_it_is_to_calibrate(tmp_path):
    p = write_pipeline(tmp_path, stages=[{"type": "retrieve"}, {"type": "rerank", "backend": "hybrid"}], useful={"threshold": 0.5})
    with pytest.raises(ConfigError):
        load_pipeline(p)
    assert load_pipeline(p, judge=False).config.useful.threshold == 0.5


def test_judge_calibrated_without_a_calibration_is_refused_at_load_with_the_command_that_makes_one(tmp_path):
    p = write_pipeline(tmp_path, useful={"judge": "calibrated"})
    with pytest.raises(ConfigError, match=r"useful.judge: calibrated: .*kb.calibration.json: no calibration .*`ragcost eval EVAL_SPEC --write") as e:
        load_pipeline(p)
    assert str(e.value).startswith(f"{p}:") and "\n" not in str(e.value)


def test_a_corrupt_calibration_beside_the_pipeline_is_refused_at_load(tmp_path):
    p = write_pipeline(tmp_path, useful={"judge": "calibrated"})
    (tmp_path / "kb.calibration.json").write_text("{oops")
    with pytest.raises(ConfigError, match=r"kb.calibration.json: corrupt calibration file .*refit it with `ragcost eval"):
        load_pipeline(p)
    assert load_pipeline(p, judge=False).config.useful.judge == "calibrated"  # eval can still load it to refit


def _scoring(tmp_path, name, rerank):
    from ragcost.runtime.judge import scoring_of

    folder = tmp_path / name
    folder.mkdir()
    lp = load_pipeline(write_pipeline(folder, stages=[{"type": "retrieve"}, {"type": "rerank", **rerank}]), judge=False)
    return [scoring_of(params) for cls, params in lp.stage_specs if cls.type == "rerank"]


def test_a_calibration_is_valid_for_the_rerank_options_that_make_its_scores(tmp_path):
    from ragcost.cost.calibration import Calibration, FingerprintError, check_fingerprint

    base = _scoring(tmp_path, "a", {"backend": "hybrid"})
    assert base == [{"backend": "hybrid", "model": None}]  # the defaults: what a calibration written before options were kept holds
    assert _scoring(tmp_path, "b", {"backend": "hybrid", "top_n": 5, "rrf_k": 60}) == base  # top_n and a default value change no score
    moved = _scoring(tmp_path, "c", {"backend": "hybrid", "rrf_k": 20, "prose_weight": 0.5})
    assert moved == [{"backend": "hybrid", "model": None, "options": {"rrf_k": 20, "prose_weight": 0.5}}]
    cal = Calibration.__new__(Calibration)
    cal.fingerprint = {"scoring": base}
    with pytest.raises(FingerprintError, match=r"cal.json: calibration was fit for another configuration \(scoring.0.options.prose_weight: \(none\) -> 0.5; scoring.0.options.rrf_k: \(none\) -> 20\); refit it"):
        check_fingerprint(cal, {"scoring": moved}, "cal.json", "ragcost eval SPEC --write")
