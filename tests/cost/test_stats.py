"""The one percentile function: numpy linear, None (never 0) without samples."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.cost.stats import PERCENTILE_METHOD, percentile, percentiles


class TestPercentiles:
    def test_equal_numpy_linear(self):
        xs = [0.3, 0.1, 0.7, 0.2, 0.9, 0.4]
        assert percentiles(xs) == tuple(np.percentile(xs, [50, 95, 99], method="linear"))
        assert PERCENTILE_METHOD == "linear"

    def test_no_samples_gives_none_for_each_quantile(self):
        assert percentiles([]) == (None, None, None)
        assert percentile([], 50) is None

    def test_accepts_arrays_and_generators(self):
        assert percentiles(np.arange(5.0), (50,)) == (2.0,)
        assert percentile((x for x in [1.0, 3.0]), 50) == pytest.approx(2.0)

    def test_returns_plain_floats(self):
        assert all(type(v) is float for v in percentiles([1, 2, 3]))
