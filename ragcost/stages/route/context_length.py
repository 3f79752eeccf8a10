"""``context_length``: short / medium / long buckets by prompt tokens, each its own target (endpoint and queue).

```yaml
- type: route
  router: context_length
  default: long
  buckets:
    - {max_tokens: 1024, target: short}
    - {max_tokens: 4096, target: medium}
    - {target: long}                     # no bound: everything longer
```

Prompt tokens = query + retrieved context (capped at ``context_tokens``, what the generate stage
would put in) + ``output_tokens``. Each target is a generate stage with its own ``base_url`` and
``concurrency``: that is the per-window queue, so long prompts no longer sit in the short
requests' batches. A prompt longer than every bounded bucket with no open bucket: undecided.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from ragcost.config.base import Strict
from ragcost.generate.prompt import approx_tokens
from ragcost.records import QueryState
from ragcost.stages.route.base import Decision, Router, RouterParams, router_registry


class Bucket(Strict):
    target: str
    max_tokens: Optional[int] = Field(None, ge=1, description="prompt tokens at most; none: no bound")


class ContextLengthParams(RouterParams):
    buckets: list[Bucket] = Field(min_length=1, description="shortest first; the first that holds the prompt takes it")
    output_tokens: int = Field(256, ge=0, description="the generate stage's max_tokens (the KV cache holds them too)")
    context_tokens: int = Field(2048, ge=1, description="the generate stage's context budget")

    @model_validator(mode="after")
    def _ascending(self) -> "ContextLengthParams":
        bounds = [b.max_tokens for b in self.buckets]
        if None in bounds[:-1]:
            raise ValueError("buckets: only the last bucket may leave out max_tokens (it takes everything longer)")
        known = [b for b in bounds if b is not None]
        if known != sorted(known):
            raise ValueError(f"buckets: max_tokens must grow from one bucket to the next, got {known}")
        return self


def prompt_tokens(s: QueryState, context_tokens: int, output_tokens: int) -> int:
    context = sum(approx_tokens(h.text) for h in s.hits)
    return approx_tokens(s.text) + min(context, context_tokens) + output_tokens


@router_registry.register("context_length")
class ContextLength(Router):
    name = "context_length"
    Params = ContextLengthParams

    @classmethod
    def targets_named(cls, params: ContextLengthParams) -> list[tuple[tuple, str]]:
        return [(("buckets", i, "target"), b.target) for i, b in enumerate(params.buckets)]

    def decide(self, batch: list[QueryState]) -> list[Decision]:
        p = self.params
        out = []
        for s in batch:
            n = prompt_tokens(s, p.context_tokens, p.output_tokens)
            for b in p.buckets:
                if b.max_tokens is None or n <= b.max_tokens:
                    bound = "no bound" if b.max_tokens is None else f"<= {b.max_tokens}"
                    out.append(Decision(b.target, float(n), f"prompt {n} tokens {bound}"))
                    break
            else:
                out.append(Decision(None, float(n), f"prompt {n} tokens is longer than every bucket"))
        return out
