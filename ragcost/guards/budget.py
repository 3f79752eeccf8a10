"""Refuse a query whose planned spend exceeds a limit, before any token is bought.

Planned spend = (query tokens + context tokens) x input price + ``max_tokens`` x output price of a
token-priced resource in the pipeline's price book, computed by ragcost.cost.compute (the one
place cost is computed). On ``query`` the context is not known yet: ``context_tokens`` is the
planner's estimate; on ``context`` the retrieved chunks are counted.
"""

from __future__ import annotations

from pydantic import Field

from ragcost.records import UsageRecord
from ragcost.errors import ConfigError
from ragcost.guards.base import Finding, Guard, GuardParams, guard_registry


class BudgetParams(GuardParams):
    resource: str = Field(description="token-priced resource in the price book (the generator's model)")
    limit_usd: float = Field(gt=0, description="most a single query may plan to spend")
    max_tokens: int = Field(512, ge=0, description="output tokens the generator may produce")
    context_tokens: int = Field(0, ge=0, description="estimated context tokens when checking on: query")


@guard_registry.register("budget")
class BudgetGuard(Guard):
    name = "budget"
    Params = BudgetParams
    targets = ("query", "context")
    policies = ("block", "flag")
    default_policy = "block"

    def _price(self):
        from ragcost.cost.pricebook import TokenResource

        if self.ctx is None:
            raise ConfigError("guard 'budget' needs a context with the price book; construct it with (params, ctx)")
        res = self.ctx.price_book.resource(self.params.resource, "guard 'budget'")
        if not isinstance(res, TokenResource):
            raise ConfigError(f"guard 'budget': resource {self.params.resource!r} is {res.kind}-priced; name a tokens resource (the generator's model)")
        return res

    def warm_up(self) -> None:
        self._price()

    def _count(self, texts: list[str]) -> list[int]:
        try:
            return self.ctx.embedder.count_tokens(texts)
        except Exception:  # no tokenizer at hand: ~4 characters per token
            return [len(t) // 4 + 1 for t in texts]

    def check(self, batch, on: str) -> list[list[Finding]]:
        from ragcost.cost.compute import token_cost

        res = self._price()
        q = self._count([s.text for s in batch])
        out = []
        for s, nq in zip(batch, q):
            ctx = sum(self._count([h.text for h in s.hits])) if on == "context" and s.hits else self.params.context_tokens
            plan = UsageRecord(stage="budget", resource=self.params.resource, input_tokens=nq + ctx, output_tokens=self.params.max_tokens)
            usd = token_cost(plan, res)
            s.notes.setdefault("planned_usd", round(usd, 8))
            if usd > self.params.limit_usd:
                out.append([Finding(self.name, "over_budget", 1.0, on=on, reason=(
                    f"planned ${usd:.6f} ({nq + ctx} input + {self.params.max_tokens} output tokens of {self.params.resource}) "
                    f"exceeds the limit ${self.params.limit_usd:.6f}"))])
            else:
                out.append([])
        return out
