"""`ragcost eval` on a routing spec: the curve over thresholds, the chosen threshold, APGR and the HTML plot."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragcost.cli.main import main
from ragcost.errors import ConfigError
from ragcost.evaluate.routing import CurvePoint, apgr, choose, curve, fold_scores, run_routing
from tests.cli.conftest import REPO


def point(t, share, recall, pgr=None):
    return CurvePoint(t, share, recall, 1.0, 1.0, 1.0, recall if pgr is None else pgr, 0)


class TestCurve:
    def test_share_recall_and_dollars_per_threshold(self):
        scores = np.array([0.9, 0.6, 0.2, 0.1, np.nan])
        needs = np.array([True, True, False, False, False])
        pts = curve(scores, needs, np.where(needs, 0.0, 1.0), np.ones(5), 1e-3, 1e-2, [0.5, 0.7], default_large=True)
        a, b = pts
        assert (a.share_large, a.recall_large, a.undecided) == (0.6, 1.0, 1)  # the undecided one goes to the default
        assert (b.share_large, b.recall_large) == (0.4, 0.5)
        assert a.usd_per_1k == pytest.approx(1000 * (0.6 * 1e-2 + 0.4 * 1e-3))
        assert a.pgr == 1.0 and b.pgr == pytest.approx(0.5)

    def test_apgr_is_the_area_under_pgr_over_the_share(self):
        assert apgr([point(0.5, 0.5, 0.5)]) == pytest.approx(0.5)  # the random router
        assert apgr([point(0.5, 0.5, 1.0)]) == pytest.approx(0.75)

    def test_the_cheapest_threshold_meeting_the_floor_is_chosen_else_the_best_within_the_share(self):
        pts = [point(0.2, 0.8, 0.98), point(0.4, 0.6, 0.96), point(0.6, 0.4, 0.8)]
        assert choose(pts, 0.95, 0.5)[0].threshold == 0.4
        p, why = choose(pts, 0.99, 0.5)
        assert p.threshold == 0.6 and "no threshold reaches recall 0.99" in why

    def test_a_query_is_never_its_own_neighbour(self):
        vecs = np.eye(4, dtype=np.float32)  # every query is near only itself
        s = fold_scores(vecs, np.array([1, 1, 0, 0], np.float32), 2, 0, 3, 0.5)
        assert np.isnan(s).all()


def test_the_committed_spec_prints_the_curve_and_a_chosen_threshold_and_plots_it(tmp_path, capsys):
    html = tmp_path / "routing.html"
    assert main(["eval", str(REPO / "eval" / "routing-quickstart.yaml"), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "share large" in out and "recall needs-large" in out and "APGR" in out
    assert "chosen: threshold" in out
    page = html.read_text()
    assert page.count("<svg") == 2 and "recall of needs-large vs share to large" in page


def test_the_committed_labelled_set_is_large_enough_and_clean():
    rows = [json.loads(x) for x in (REPO / "eval" / "routing" / "quickstart.jsonl").read_text().splitlines()]
    assert len(rows) >= 200 and {r["label"] for r in rows} == {"small", "large"}
    assert len({r["text"] for r in rows}) == len(rows)


def test_a_spec_without_a_price_for_a_target_is_refused(tmp_path):
    (tmp_path / "l.jsonl").write_text('{"text": "a", "label": "small"}\n')
    spec = tmp_path / "r.yaml"
    spec.write_text(f"routing:\n  pipeline: {REPO / 'pipelines' / 'quickstart.yaml'}\n  labelled: l.jsonl\n"
                    "  targets: {small: {input_per_1m: 1, output_per_1m: 1, input_tokens: 1, output_tokens: 1}}\n")
    with pytest.raises(ConfigError, match="no price for target 'large'"):
        run_routing(spec)
