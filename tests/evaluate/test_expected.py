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


class TestLogisticSolver:
    """The logistic candidates are scikit-learn's objective solved by Newton's method (expected.logistic_l2)."""

    @pytest.mark.parametrize("seed", range(12))
    def test_the_optimum_is_scikit_learns_solved_to_a_tight_tolerance(self, seed):
        from sklearn.linear_model import LogisticRegression

        from ragcost.evaluate.expected import logistic_l2

        rng = np.random.default_rng(seed)
        n, d = int(rng.integers(30, 2500)), int(rng.integers(1, 4))
        Z = rng.normal(size=(n, d)) * rng.uniform(0.1, 3.0, size=d)
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(Z @ rng.normal(size=d) * rng.uniform(0, 5) + rng.normal())))).astype(float)
        y[:2] = [0.0, 1.0]  # both classes
        Z = (Z - Z.mean(axis=0)) / Z.std(axis=0)
        ref = LogisticRegression(C=1.0, max_iter=100_000, tol=1e-12).fit(Z, y)
        coef, intercept = logistic_l2(Z, y)
        assert np.abs(coef - ref.coef_[0]).max() < 1e-5 and abs(intercept - ref.intercept_[0]) < 1e-5

    def test_separable_classes_stay_finite_under_the_penalty(self):
        from ragcost.evaluate.expected import logistic_l2

        Z = np.linspace(-1, 1, 40)[:, None]
        coef, intercept = logistic_l2(Z, (Z[:, 0] > 0).astype(float))
        assert np.isfinite(coef).all() and np.isfinite(intercept) and coef[0] > 0

    def test_the_choice_and_held_out_quality_are_scikit_learns_lbfgs_ones(self, monkeypatch):
        """A faster fit, the same verdicts: on seeded judged queries the candidate chosen is the one the previous
        fit (scikit-learn's lbfgs at its defaults) chose, and the figures eval prints agree to their digits."""
        import ragcost.evaluate.expected as ex
        from ragcost.cost.calibration import FEATURES, Model

        def lbfgs_fit(X, y, kind, features):
            if kind == "isotonic":
                return new_fit(X, y, kind, features)
            from sklearn.linear_model import LogisticRegression

            Z = X[:, [FEATURES.index(f) for f in features]]
            mean, scale = Z.mean(axis=0), Z.std(axis=0)
            scale[scale <= 0] = 1.0
            if len(set(y.tolist())) < 2:
                return new_fit(X, y, kind, features)
            lr = LogisticRegression(C=1.0, max_iter=1000).fit((Z - mean) / scale, y)
            return Model("logistic", list(features), coef=[float(c) for c in lr.coef_[0]],
                         intercept=float(lr.intercept_[0]), mean=mean.tolist(), scale=scale.tolist())

        new_fit = ex.fit_one
        for seed in (1, 2, 3):
            qs = synthetic(120, seed=seed)
            new = ex.held_out_quality(qs)
            new_label = ex.choose(qs)[0].label()
            with monkeypatch.context() as m:
                m.setattr(ex, "fit_one", lbfgs_fit)
                old = ex.held_out_quality(qs)
                old_label = ex.choose(qs)[0].label()
            assert new_label == old_label
            assert new["predicted"] == pytest.approx(old["predicted"], rel=1e-3)
            assert new["ece"] == pytest.approx(old["ece"], abs=1e-3)


def test_a_repeated_fit_is_answered_from_its_input_and_is_a_copy():
    import ragcost.evaluate.expected as ex

    qs = synthetic(60, seed=4)
    first = fit_expected(qs)
    first["fingerprint"] = "mine"  # the caller's own field must not reach the next caller
    again = fit_expected(synthetic(60, seed=4))
    assert "fingerprint" not in again and again["model"] == first["model"] and again["quality"] == first["quality"]
    other = fit_expected(synthetic(60, seed=5))
    assert other["quality"] != first["quality"]  # another input is fit anew
    ex._FITS.clear()
    assert fit_expected(qs)["model"] == first["model"]  # the fit itself gives the same answer
