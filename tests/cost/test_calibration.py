"""The expected-useful judge's calibration file: what it predicts, and every way a file is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragcost.cost.calibration import (MIN_JUDGED, Calibration, Model, calibration_path, check_fingerprint, doc_features,
                                      features_of, load, save)
from ragcost.cost.useful import make_judge, supported_citations
from ragcost.errors import ConfigError, FingerprintError

FP = {"model": "m", "dim": 384, "k": 10, "index": {"backend": "faiss", "kind": "flat", "build": {}, "search": {}}}


def _cal(judged: int = 200) -> Calibration:
    return Calibration(Model("isotonic", ["score"], x=[0.2, 0.5, 0.8], y=[0.0, 0.25, 0.9]), dict(FP),
                       {"name": "toy"}, judged, 40, {}, "ragcost eval spec.yaml --write")


class TestPrediction:
    def test_the_expected_count_is_the_sum_of_each_documents_probability_once_per_document(self):
        hits = [{"doc_id": "a", "score": 0.8}, {"doc_id": "a", "score": 0.7}, {"doc_id": "b", "score": 0.5}]
        assert _cal().expected(hits) == pytest.approx(0.9 + 0.25)
        assert make_judge("calibrated", calibration=_cal()).count(hits) == pytest.approx(1.15)

    def test_only_the_first_k_documents_count_as_the_fit_did(self):
        cal = _cal()
        cal.fingerprint["k"] = 1
        assert cal.expected([{"doc_id": "a", "score": 0.8}, {"doc_id": "b", "score": 0.8}]) == pytest.approx(0.9)

    def test_features_are_score_rank_gap_and_log_rank(self):
        rows = features_of([0.9, 0.7])
        assert np.allclose(rows, [[0.9, 1, 0, 0], [0.7, 2, 0.2, np.log(2)]])
        ids, _ = doc_features([{"doc_id": "x", "score": None}, {"doc_id": "y", "score": 0.3}])
        assert ids == ["y"]

    def test_a_logistic_model_predicts_from_standardised_features(self):
        m = Model("logistic", ["score", "gap"], coef=[2.0, -1.0], intercept=-1.0, mean=[0.5, 0.1], scale=[0.1, 0.1])
        p = m.predict(features_of([0.6, 0.5]))
        z = np.array([2.0 * 1 - 1.0 * -1 - 1, 2.0 * 0 - 1.0 * 0 - 1])
        assert p == pytest.approx(1 / (1 + np.exp(-z)))


class TestFile:
    def test_a_saved_file_loads_back_the_same(self, tmp_path):
        p = tmp_path / "kb.calibration.json"
        save(_cal(), p)
        back = load(p, "refit")
        assert back.to_dict() == _cal().to_dict()
        assert calibration_path(tmp_path / "kb.yaml") == p

    def test_a_missing_file_names_the_command_that_makes_one(self, tmp_path):
        with pytest.raises(ConfigError, match=r"kb.calibration.json: no calibration .* make one with `ragcost eval X --write`"):
            load(tmp_path / "kb.calibration.json", "ragcost eval X --write")

    @pytest.mark.parametrize("text", ["{not json", "[]", json.dumps({"kind": "other"}),
                                      json.dumps({**_cal().to_dict(), "model": {"kind": "isotonic", "features": ["score"], "x": [1, 0], "y": [0, 1]}}),
                                      json.dumps({**_cal().to_dict(), "model": {"kind": "isotonic", "features": ["score"], "x": [0, 1], "y": [0, 7]}}),
                                      json.dumps({**_cal().to_dict(), "format": 99})])
    def test_a_corrupt_file_is_one_line_naming_it_and_the_refit(self, tmp_path, text):
        p = tmp_path / "c.json"
        p.write_text(text)
        with pytest.raises(ConfigError, match=r"c.json: corrupt calibration file .*refit it with `refit`") as e:
            load(p, "refit")
        assert "\n" not in str(e.value)

    def test_a_fit_on_too_few_judged_documents_is_refused(self, tmp_path):
        p = tmp_path / "c.json"
        save(_cal(judged=MIN_JUDGED - 1), p)
        with pytest.raises(ConfigError, match=rf"fit on {MIN_JUDGED - 1} judged documents, fewer than {MIN_JUDGED}.*`refit`"):
            load(p, "refit")

    def test_another_configuration_is_refused_naming_what_changed(self, tmp_path):
        with pytest.raises(FingerprintError, match=r"c.json: calibration was fit for another configuration \(dim: 384 -> 128.*`refit`"):
            check_fingerprint(_cal(), {**FP, "dim": 128}, tmp_path / "c.json", "refit")
        check_fingerprint(_cal(), dict(FP), tmp_path / "c.json", "refit")


class TestSupportedCitations:
    ANSWER = "The first sentence says one thing. [1] The second sentence is made up. [2] A third one. [1]"

    def test_a_citation_of_a_flagged_sentence_does_not_count(self):
        a = self.ANSWER.index("The second")
        b = self.ANSWER.index("[2]") - 1
        assert supported_citations(self.ANSWER, ["d1", "d2"], [(a, b)]) == ["d1"]

    def test_with_nothing_flagged_every_in_range_citation_counts(self):
        assert supported_citations(self.ANSWER, ["d1", "d2"], []) == ["d1", "d2"]
        assert supported_citations("x [9]", ["d1"], []) == []
