"""The Stage contract every stage's test class inherits (set ``stage`` and ``batch``)."""

from __future__ import annotations

import pytest

from ragcost.records import OUTCOMES, QueryState
from ragcost.runtime.runner import Runner
from ragcost.stages.base import Stage, stage_registry


class StageContract:
    """Subclasses provide ``stage`` (built with a StageContext, warmed up) and ``batch`` (ready query states)."""

    @pytest.fixture
    def stage(self) -> Stage:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def batch(self) -> list[QueryState]:  # pragma: no cover - overridden
        raise NotImplementedError

    def test_is_registered_and_names_itself(self, stage):
        if not stage.embeds_queries:  # the implicit first stage is built by the pipeline, not from YAML
            assert stage_registry.get(stage.type) is type(stage)
        assert stage.name and stage.resource

    def test_params_refuse_unknown_keys(self, stage):
        with pytest.raises(Exception, match="xyz"):
            type(stage).Params.model_validate({"xyz": 1})

    def test_the_runner_times_and_prices_it_and_every_query_keeps_a_known_outcome(self, stage, batch):
        res = Runner([stage], stage.ctx.price_book).run(batch)
        assert res.calls, "the runner recorded no call"
        for c in res.calls:
            assert c.record.wall_seconds >= 0 and c.cost_usd >= 0 and c.record.stage.startswith(stage.name.split(":")[0])
        for s in batch:
            assert s.outcome in OUTCOMES and s.usage == []
            assert any(c.serves(s) for c in res.calls), f"no call charged query {s.id!r}"

    def test_warm_up_twice_is_harmless(self, stage):
        stage.warm_up()
        stage.warm_up()
