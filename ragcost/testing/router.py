"""The Router contract every router's test class inherits (set ``router`` and ``batch``)."""

from __future__ import annotations

import pytest

from ragcost.records import QueryState
from ragcost.stages.route.base import Decision, Router, router_registry


class RouterContract:
    """Subclasses provide ``router`` (warmed up) and ``batch`` (query states as the pipeline hands them on)."""

    @pytest.fixture
    def router(self) -> Router:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def batch(self) -> list[QueryState]:  # pragma: no cover - overridden
        raise NotImplementedError

    def test_comes_from_the_registry(self, router):
        assert type(router) is router_registry.get(router.name)

    def test_one_decision_per_query_naming_only_targets_its_options_name(self, router, batch):
        named = {t for _, t in type(router).targets_named(router.params)}
        decisions = router.decide(batch)
        assert len(decisions) == len(batch) and all(isinstance(d, Decision) for d in decisions)
        for d in decisions:
            assert d.reason, "every decision says why"
            assert d.target is None or d.target in named, (d.target, named)

    def test_deciding_leaves_the_queries_as_they_were(self, router, batch):
        before = [(s.text, s.route, s.outcome, s.hit_count) for s in batch]
        router.decide(batch)
        assert [(s.text, s.route, s.outcome, s.hit_count) for s in batch] == before

    def test_options_refuse_unknown_keys(self, router):
        with pytest.raises(Exception, match="xyz"):
            type(router).Params.model_validate({**router.params.model_dump(), "xyz": 1})

    def test_warm_up_twice_is_harmless(self, router):
        router.warm_up()
        router.warm_up()
