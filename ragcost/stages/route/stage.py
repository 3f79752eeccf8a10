"""The ``route`` stage: one registered router picks each query's generate target; undecided goes to ``default``.

```yaml
stages:
  - {type: retrieve, k: 5}
  - {type: route, router: knn, default: large, examples: ../eval/routing/quickstart.jsonl, threshold: 0.4}
  - {type: generate, target: small, backend: vllm, base_url: http://127.0.0.1:8001/v1, model: small,
     resource: gpu-small, escalate_to: large}
  - {type: guard, target: small, on: answer, checks: [grounded], escalate_to: large}
  - {type: generate, target: large, backend: vllm, base_url: http://127.0.0.1:8002/v1, model: large, resource: gpu-large}
```

Targets are the labels of the pipeline's generate stages (``target:``); a stage with a
``target`` runs only on the queries routed there. Each query's decision goes to
``s.decision`` (``router``, ``target``, ``score``, ``reason``, ``default``) and to the
ledger (``route``, ``route_path``, ``route_score``, ``route_reason``).
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, ValidationError, model_validator

from ragcost.config.base import one_line
from ragcost.records import QueryState, UsageRecord
from ragcost.stages.base import Stage, StageParams, stage_registry
from ragcost.stages.route.base import RouterParams, router_registry


class RouteParams(StageParams):
    """``router`` plus that router's own options, given flat in the stage's YAML."""

    model_config = ConfigDict(extra="allow")
    router: str = Field(description="a registered router: rules | knn | context_length")
    default: str = Field(description="the target of a query the router cannot decide")

    @model_validator(mode="after")
    def _router_options(self) -> "RouteParams":
        self.router_params()
        return self

    def router_params(self) -> RouterParams:
        if self.router not in router_registry:
            raise ValueError(f"unknown router {self.router!r}; installed: {router_registry.known()}")
        cls = router_registry.get(self.router)
        try:
            return cls.Params.model_validate(dict(self.model_extra or {}))
        except ValidationError as e:
            raise ValueError(f"router {self.router!r}: {one_line(e, known=list(cls.Params.model_fields))}") from None


@stage_registry.register("route")
class Route(Stage):
    type = "route"
    Params = RouteParams
    placement = "before-generate"
    optional = True
    eval_skips = "a route picks a generate target eval does not judge"

    def __init__(self, params: RouteParams, ctx) -> None:
        super().__init__(params, ctx)
        self.router = router_registry.get(params.router)(params.router_params(), ctx)

    @property
    def name(self) -> str:
        return self.params.name or f"route:{self.params.router}"

    def warm_up(self) -> None:
        self.router.warm_up()

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        counts: dict[str, int] = {}
        undecided = 0
        for s, d in zip(batch, self.router.decide(batch)):
            target = d.target or self.params.default
            reason = d.reason if d.target else f"undecided ({d.reason}); default target {self.params.default!r}"
            undecided += d.target is None
            s.decision = {"router": self.params.router, "target": target, "score": d.score,
                                "reason": reason, "default": d.target is None}
            s.branch(self.name, target)
            counts[target] = counts.get(target, 0) + 1
        usage.notes["route"] = {**counts, "(undecided)": undecided}  # flat counters: reports sum them
        return batch
