"""Fitting the expected-useful judge: scikit-learn's fit, the choice among candidates, held-out quality."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.cost.calibration import features_of
from ragcost.errors import ConfigError
from ragcost.evaluate.expected import Judged, choose, fit_expected, held_out_quality, quality, quality_lines, split_queries


def synthetic(n_queries: int, seed: int = 1) -> list[Judged]:
    """Queries whose documents are relevant with a known P rising with the score (seeded)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_queries):
        scores = np.sort(rng.uniform(0.2, 0.9, 10))[::-1]
        p = 1 / (1 + np.exp(-(scores - 0.65) * 12))
        out.append(Judged(f"q{i}", features_of(scores), (rng.uniform(size=10) < p).astype(float)))
    return out


def test_held_out_predictions_match_the_actual_count_and_are_calibrated():
    q = held_out_quality(synthetic(300))
    assert abs(q["ratio"] - 1) < 0.1 and q["ece"] < 0.05
    assert sum(b["documents"] for b in q["buckets"]) == q["documents"] == 3000


def test_a_model_fit_on_one_half_predicts_the_other_half():
    qs = synthetic(400)
    fit_ids, test_ids = split_queries([x.qid for x in qs], seed=3)
    assert not set(fit_ids) & set(test_ids) and len(fit_ids) + len(test_ids) == 400
    model, briers = choose([x for x in qs if x.qid in set(fit_ids)])
    test = [x for x in qs if x.qid in set(test_ids)]
    p = model.predict(np.vstack([x.X for x in test]))
    y = np.concatenate([x.y for x in test])
    assert abs(p.sum() / y.sum() - 1) < 0.1 and quality(p, y)["ece"] < 0.05
    assert len(briers) == 3 and all(0 < v < 0.25 for v in briers.values())


def test_ece_sees_a_judge_that_is_off():
    y = np.array([1.0, 0, 0, 0] * 50)
    assert quality(np.full(200, 0.25), y)["ece"] == pytest.approx(0.0)
    assert quality(np.full(200, 0.75), y)["ece"] == pytest.approx(0.5)


def test_too_few_judged_documents_or_none_relevant_is_said_not_divided_by():
    few = fit_expected(synthetic(3))
    assert "fewer than the 50" in few["error"]
    none = [Judged(x.qid, x.X, np.zeros_like(x.y)) for x in synthetic(20)]
    assert "no retrieved document is relevant" in fit_expected(none)["error"]
    assert quality_lines(fit_expected(none))[0].startswith("expected-useful judge: not fit: no retrieved document")
    with pytest.raises(ConfigError, match="no retrieved document is relevant"):
        choose(none)


def test_the_printed_block_gives_buckets_ece_and_the_ratio():
    lines = quality_lines(fit_expected(synthetic(100)))
    assert "ECE" in lines[0] and "predicted" in lines[0] and "P bucket" in lines[1] and "candidates" in lines[-1]
