from __future__ import annotations

from ragcost.evaluate.pareto import mark, pareto_front, recommend
from ragcost.evaluate.run import ConfigResult


def res(name, q, usd, p95):
    return ConfigResult(name, metrics={"ndcg@10": q}, usd_per_useful=usd, p95_ms=p95)


class TestPareto:
    def test_front_keeps_every_non_dominated_trade_off(self):
        rs = [res("best", 0.70, 3.0, 5.0), res("cheap", 0.60, 1.0, 5.0), res("fast", 0.60, 3.0, 0.5),
              res("dominated", 0.60, 3.0, 5.0), res("worse", 0.50, 4.0, 6.0)]
        assert [rs[i].name for i in pareto_front(rs, "ndcg@10")] == ["best", "cheap", "fast"]

    def test_zero_useful_documents_is_never_cheapest(self):
        rs = [res("none", 0.0, None, 0.1), res("some", 0.1, 5.0, 1.0)]
        assert recommend(rs, "ndcg@10", 100) == 1

    def test_recommends_the_cheapest_within_x_percent_of_the_best_quality(self):
        rs = [res("best", 0.700, 3.0, 5.0), res("close", 0.690, 2.0, 5.0), res("far", 0.600, 1.0, 1.0)]
        assert rs[recommend(rs, "ndcg@10", 2)].name == "close"
        assert rs[recommend(rs, "ndcg@10", 0)].name == "best"
        assert rs[recommend(rs, "ndcg@10", 20)].name == "far"

    def test_mark_ignores_skipped_configs(self):
        rs = [res("a", 0.5, 1.0, 1.0), ConfigResult("skipped", status="skipped", reason="no")]
        mark(rs, "ndcg@10", 2)
        assert rs[0].pareto and rs[0].recommended and not rs[1].pareto
