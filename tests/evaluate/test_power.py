"""What the judgments can detect: the printed figure against a simulation on SciFact's own per-query nDCG.

The simulation injects a known nDCG loss into a real pair of configurations (flat d384 and flat d256: their
per-query disagreement as measured, shifted so the mean loss is exactly delta), draws new question sets of
30 and 150 with replacement from SciFact's 300, and finds the smallest delta that the paired bootstrap's 95%
interval calls significant in 80% of them. The printed figure (``power.detectable``, median over the same
question sets) must be within 25% of it.
"""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.evaluate.bootstrap import Resampler
from ragcost.evaluate.power import FloorPower, detectable, floor_power, questions_needed, z_sum


class TestFormula:
    def test_the_detectable_difference_is_2_8_standard_errors(self):
        assert z_sum() == pytest.approx(1.95996 + 0.84162, abs=1e-4)
        d = np.random.default_rng(0).normal(0, 0.2, 400)
        rs = Resampler(400)
        assert detectable(rs, np.zeros(400), d) == pytest.approx(z_sum() * d.std(ddof=1) / 20, rel=0.05)

    def test_questions_needed_grow_with_the_square_of_the_precision_asked(self):
        assert questions_needed(100, 0.04, 0.02) == 400
        assert questions_needed(100, 0.04, 0.0) is None

    def test_a_floor_finer_than_the_judgments_see_is_a_warning(self):
        fp = FloorPower("ndcg@10", 31, 0.98, 0.70, "a", "b", detectable=0.066, needed=400)
        assert not fp.sees_floor and "31 questions detect only 9.4%" in fp.warning()
        assert "about 400 questions" in fp.warning() and "lower the floor to 0.906" in fp.warning()
        assert FloorPower("ndcg@10", 900, 0.98, 0.70, "a", "b", 0.01, 230).warning() is None


@pytest.fixture(scope="module")
def scifact_pair(shared_data, tmp_path_factory):
    """SciFact's 300 judged queries (the suite's sample of its corpus, tests/datasets.py) on flat d384 and d256 (the fastest runtime's cached vectors: nothing embedded)."""
    import json

    from ragcost.evaluate.run import run_eval
    from ragcost.evaluate.spec import load_spec
    from tests.conftest import EVAL_CACHE, fastest_runtime
    from tests.datasets import scifact_sample
    from tests.evaluate.conftest import REPO

    spec = tmp_path_factory.mktemp("power") / "scifact.yaml"
    spec.write_text(f"pipeline: {REPO}/pipelines/scifact.yaml\ndataset: {scifact_sample(shared_data)}\nk: [10]\n"
                    f"dims: [384, 256]\nembedders: [{json.dumps(fastest_runtime())}]\nserved_rounds: 1\n"
                    f"grid:\n  - index: {REPO}/indexes/flat.yaml\n")
    run = run_eval(load_spec(spec), EVAL_CACHE, traffic="64")  # quality only is read: the served path in batches, timed once
    assert run.embedded_documents == 0
    return run


def _simulated(noise: np.ndarray, n: int, idx: np.ndarray, rs: Resampler) -> float:
    """The smallest injected loss the 95% paired bootstrap interval detects in 80% of the question sets ``idx``."""
    base = noise[idx] @ rs.weights.T / n  # each set's resampled mean differences, before the loss

    def power(delta: float) -> float:
        lo, hi = np.percentile(base - delta, [2.5, 97.5], axis=1)
        return float(np.mean((hi < 0) | (lo > 0)))

    lo_d, hi_d = 0.0, 1.0
    for _ in range(30):  # power grows with the loss: bisect
        mid = (lo_d + hi_d) / 2
        lo_d, hi_d = (lo_d, mid) if power(mid) >= 0.8 else (mid, hi_d)
    return hi_d


@pytest.mark.slow
@pytest.mark.parametrize("n", [30, 150])
def test_the_printed_detectable_loss_is_within_25pct_of_the_simulated_one(scifact_pair, n):
    res = {r.name: r for r in scifact_pair.ok()}
    a = res["flat d384 f32"].per_query["ndcg@10"]
    c = res["flat d256 f32"].per_query["ndcg@10"]
    assert len(a) == 300
    noise = (c - a) - (c - a).mean()  # the pair's real disagreement per question, mean 0; a loss delta is then -delta
    idx = np.random.default_rng(11).integers(0, len(a), size=(400, n))
    rs = Resampler(n)
    sim = _simulated(noise, n, idx, rs)
    printed = float(np.median([detectable(rs, a[i], (a + noise)[i]) for i in idx]))
    print(f"n={n}: simulated {sim:.4f}, printed (median over 400 question sets) {printed:.4f}, ratio {printed / sim:.3f}")
    assert printed == pytest.approx(sim, rel=0.25)


@pytest.mark.slow
def test_eval_records_and_warns_what_its_judgments_cannot_see(scifact_pair):
    pw = scifact_pair.intervals["power"]
    assert pw["queries"] == 300 and pw["pair"] == ["flat d384 f32", "flat d256 f32"]
    res = {r.name: r for r in scifact_pair.ok()}
    fp = floor_power(scifact_pair.ok(), res["flat d384 f32"], "ndcg@10", 0.98, Resampler(300))
    assert pw["detectable"] == pytest.approx(fp.detectable)
    assert pw["sees_floor"] == (pw["detectable"] <= pw["floor_loss"])
    assert any("questions detect only" in w for w in scifact_pair.warnings) == (not pw["sees_floor"])
