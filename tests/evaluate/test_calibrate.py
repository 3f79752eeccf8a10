"""Fitting the useful-score threshold from (score, relevant?) pairs."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.evaluate.calibrate import calibrate, short_decimal


def _brute(pairs, target):
    """The lowest t among the scores whose {score >= t} has precision >= target (written independently)."""
    ok = []
    for t in sorted({s for s, _ in pairs}):
        above = [r for s, r in pairs if s >= t]
        if sum(above) and sum(above) / len(above) >= target:
            ok.append(t)
    return min(ok) if ok else None


class TestCalibrate:
    def test_lowest_threshold_reaching_the_precision_target_and_the_recall_it_keeps(self):
        pairs = [(0.9, True), (0.8, True), (0.7, False), (0.6, True), (0.5, False), (0.4, False), (0.3, True)]
        c = calibrate(pairs, 0.6)
        # >= 0.6: 3 relevant of 4 (0.75); >= 0.5: 3 of 5 (0.6) reaches 0.6; >= 0.4: 3 of 6 does not; >= 0.3: 4 of 7 does not
        assert 0.4 < c.threshold <= 0.5 and c.threshold == 0.5
        assert c.precision == pytest.approx(0.6) and c.recall == pytest.approx(3 / 4) and c.kept == 5
        assert (c.pairs, c.relevant) == (7, 4)

    def test_ties_enter_together(self):
        c = calibrate([(0.8, True), (0.5, True), (0.5, False), (0.5, False)], 0.6)
        assert c.threshold > 0.5 and c.kept == 1  # the three at 0.5 together give 2/4 = 0.5

    def test_unreachable_target_says_so_with_the_best_precision(self):
        c = calibrate([(0.9, False), (0.8, True), (0.7, False)], 0.9)
        assert c.threshold is None and c.precision == pytest.approx(0.5)
        assert "no score threshold reaches precision 0.9" in c.line() and "0.500" in c.line()
        assert calibrate([(0.9, False)], 0.5).precision is None  # nothing relevant retrieved at all

    @pytest.mark.parametrize("seed", range(5))
    def test_matches_a_brute_force_search_on_random_data(self, seed):
        rng = np.random.default_rng(seed)
        scores = np.round(rng.uniform(-0.2, 0.9, 200), 3)  # rounded: ties happen
        rel = rng.uniform(size=200) < (scores + 0.2) / 1.1
        pairs = list(zip(scores.tolist(), rel.tolist()))
        for target in (0.3, 0.5, 0.7, 0.9):
            want = _brute(pairs, target)
            got = calibrate(pairs, target)
            if want is None:
                assert got.threshold is None
            else:  # the written threshold keeps exactly the documents the exact one keeps
                assert [s >= got.threshold for s, _ in pairs] == [s >= want for s, _ in pairs]
                assert got.precision >= target

    def test_short_decimal_stays_between_the_neighbouring_scores(self):
        assert short_decimal(0.6123456, 0.58) == 0.6
        assert short_decimal(0.6123456, 0.61) == 0.612
        assert short_decimal(0.5, 0.4999) == 0.5
