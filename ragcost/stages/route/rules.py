"""``rules``: the first matching rule picks the target; no rule matches: undecided (the stage's default).

```yaml
- type: route
  router: rules
  default: large
  rules:
    - {target: large, regex: "\\b(compare|difference|versus|vs\\.?|why)\\b"}
    - {target: small, top_score_min: 0.6, margin_min: 0.05}   # one clearly matching chunk
    - {target: large, context_tokens_min: 1500}
```

Every condition a rule sets must hold. Tokens are counted as the generate stage counts them
without a tokenizer (4 characters a token). ``metadata`` is matched against the top hit's metadata.
The decision's score is the top hit's score (None without hits).
"""

from __future__ import annotations

import re
from typing import Any, Optional

from pydantic import Field, field_validator

from ragcost.config.base import Strict
from ragcost.generate.prompt import approx_tokens
from ragcost.records import QueryState
from ragcost.stages.route.base import Decision, Router, RouterParams, router_registry


class Rule(Strict):
    target: str = Field(description="the route target when every condition below holds")
    regex: Optional[str] = Field(None, description="the query text matches this (case-insensitive)")
    query_tokens_min: Optional[int] = Field(None, ge=0)
    query_tokens_max: Optional[int] = Field(None, ge=0)
    context_tokens_min: Optional[int] = Field(None, ge=0, description="tokens of the retrieved chunks")
    context_tokens_max: Optional[int] = Field(None, ge=0)
    top_score_min: Optional[float] = Field(None, description="the retrieval's (or re-ranker's) top score")
    top_score_max: Optional[float] = None
    margin_min: Optional[float] = Field(None, description="top score minus the second: one clearly matching chunk")
    metadata: dict[str, Any] = Field(default_factory=dict, description="fields the top hit's metadata must equal")

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v: Optional[str]) -> Optional[str]:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"regex {v!r} does not compile ({e}); fix the pattern") from None
        return v


class RulesParams(RouterParams):
    rules: list[Rule] = Field(min_length=1, description="tried in order; the first that matches decides")


def _facts(s: QueryState) -> dict[str, Any]:
    hits = s.hits
    scores = [h.score for h in hits]
    return {
        "query_tokens": approx_tokens(s.text),
        "context_tokens": sum(approx_tokens(h.text) for h in hits),
        "top_score": scores[0] if scores else None,
        "margin": scores[0] - scores[1] if len(scores) > 1 else None,
        "metadata": hits[0].metadata if hits else {},
    }


def matches(rule: Rule, s: QueryState, f: dict[str, Any]) -> Optional[str]:
    """Why the rule matches (its conditions, with the values seen), or None when one fails."""
    why = []
    if rule.regex is not None:
        if not re.search(rule.regex, s.text, re.IGNORECASE):
            return None
        why.append(f"regex {rule.regex!r}")
    for key, fact, lower in (("query_tokens_min", "query_tokens", True), ("query_tokens_max", "query_tokens", False),
                             ("context_tokens_min", "context_tokens", True), ("context_tokens_max", "context_tokens", False),
                             ("top_score_min", "top_score", True), ("top_score_max", "top_score", False),
                             ("margin_min", "margin", True)):
        bound = getattr(rule, key)
        if bound is None:
            continue
        value = f[fact]
        if value is None or (value < bound if lower else value > bound):
            return None
        why.append(f"{fact} {value:.4g} {'>=' if lower else '<='} {bound:g}")
    for k, v in rule.metadata.items():
        if f["metadata"].get(k) != v:
            return None
        why.append(f"metadata {k}={v!r}")
    return ", ".join(why) or "no conditions"


@router_registry.register("rules")
class Rules(Router):
    name = "rules"
    Params = RulesParams

    @classmethod
    def targets_named(cls, params: RulesParams) -> list[tuple[tuple, str]]:
        return [(("rules", i, "target"), r.target) for i, r in enumerate(params.rules)]

    def decide(self, batch: list[QueryState]) -> list[Decision]:
        out = []
        for s in batch:
            f = _facts(s)
            for i, rule in enumerate(self.params.rules):
                why = matches(rule, s, f)
                if why is not None:
                    out.append(Decision(rule.target, f["top_score"], f"rule {i}: {why}"))
                    break
            else:
                out.append(Decision(None, f["top_score"], "no rule matched"))
        return out
