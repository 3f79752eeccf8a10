"""Bootstrap intervals checked against the world they describe: seeded data with a known mean, and scipy."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.evaluate.bootstrap import Resampler

TRUE_MEAN = 2 / 7  # Beta(2, 5)


def _trials(n_trials: int, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).beta(2, 5, size=(n_trials, n))


class TestIntervals:
    def test_the_95_interval_covers_the_true_mean_in_about_95_of_seeded_trials(self):
        data = _trials(600, 300, seed=1)  # 600 independent "eval runs" of 300 queries each
        ivs = Resampler(300, 2000, seed=7).intervals(data)
        covered = np.mean([iv.lo <= TRUE_MEAN <= iv.hi for iv in ivs])
        # binomial sd at p=0.95, 600 trials: 0.009; the percentile interval runs a little narrow at n=300
        assert 0.92 <= covered <= 0.975, covered

    def test_a_90_interval_covers_about_90(self):
        data = _trials(600, 200, seed=2)
        ivs = Resampler(200, 2000, seed=3, level=0.90).intervals(data)
        covered = np.mean([iv.lo <= TRUE_MEAN <= iv.hi for iv in ivs])
        assert 0.86 <= covered <= 0.93, covered

    def test_agrees_with_scipy_bootstrap_percentile_on_the_same_data(self):
        from scipy.stats import bootstrap

        x = np.random.default_rng(4).beta(0.8, 0.5, size=300)
        ours = Resampler(300, 5000, seed=5).interval(x)
        sp = bootstrap((x,), np.mean, n_resamples=5000, method="percentile",
                       random_state=np.random.default_rng(6)).confidence_interval
        width = ours.hi - ours.lo
        assert abs(ours.lo - sp.low) < 0.05 * width and abs(ours.hi - sp.high) < 0.05 * width
        assert ours.estimate == pytest.approx(x.mean())

    def test_the_interval_narrows_as_queries_grow(self):
        small = Resampler(50, 1000).interval(_trials(1, 50, 8)[0])
        large = Resampler(2000, 1000).interval(_trials(1, 2000, 8)[0])
        assert (large.hi - large.lo) < (small.hi - small.lo) / 3

    def test_the_same_seed_gives_the_same_interval(self):
        x = _trials(1, 300, 9)[0]
        assert Resampler(300, 1000, seed=1).interval(x) == Resampler(300, 1000, seed=1).interval(x)

    def test_values_over_other_queries_are_refused(self):
        with pytest.raises(ValueError, match="over 10 queries"):
            Resampler(300, 100).interval(np.zeros(10))


class TestPaired:
    def test_under_the_null_about_5_percent_of_trials_are_called_significant(self):
        rng = np.random.default_rng(10)
        base = rng.beta(2, 5, size=(300, 150))
        a = base + rng.normal(0, 0.05, size=base.shape)  # the same per-query difficulty, no true difference
        b = base + rng.normal(0, 0.05, size=base.shape)
        rs = Resampler(150, 1000, seed=11)
        ps = np.array([rs.paired(a[i], b[i]).p for i in range(len(a))])
        sig = np.array([rs.paired(a[i], b[i]).significant for i in range(len(a))])
        assert 0.02 <= (ps < 0.05).mean() <= 0.09
        assert 0.02 <= sig.mean() <= 0.10

    def test_a_real_difference_is_found_and_its_interval_covers_it(self):
        rng = np.random.default_rng(12)
        base = rng.beta(2, 5, size=300)
        a, b = base + rng.normal(0, 0.05, 300), base + 0.02 + rng.normal(0, 0.05, 300)
        p = Resampler(300, 2000).paired(a, b)
        assert p.significant and p.p < 0.01 and p.word() == "better"
        assert p.diff.lo <= 0.02 <= p.diff.hi

    def test_pairing_finds_what_two_separate_intervals_cannot(self):
        rng = np.random.default_rng(13)
        base = rng.beta(2, 5, size=300)
        a, b = base, base + 0.01 + rng.normal(0, 0.01, 300)
        rs = Resampler(300, 2000)
        ia, ib = rs.interval(a), rs.interval(b)
        assert ia.hi > ib.lo  # the separate intervals overlap ...
        assert rs.paired(a, b).significant  # ... yet the paired difference is clear

    def test_the_ratio_of_sums_interval_covers_the_true_cost_per_useful(self):
        rng = np.random.default_rng(14)
        rs = Resampler(300, 1000, seed=15)
        usd = rng.gamma(5.0, 2e-6, size=(400, 300))  # mean 1e-5 per query
        useful = rng.poisson(1.5, size=(400, 300)).astype(float)
        true = 1e-5 / 1.5
        covered = np.mean([(iv := rs.ratio_interval(usd[i], useful[i])).lo <= true <= iv.hi for i in range(400)])
        assert 0.92 <= covered <= 0.98, covered

    def test_no_useful_document_has_no_ratio_interval(self):
        assert Resampler(20, 100).ratio_interval(np.ones(20), np.zeros(20)) is None
