"""The cache's like-with-like check: the stages that shaped a stored answer's hits, run again on the new query.

A semantic candidate that passed the meaning check is verified by re-running every ``retrieve``
and ``rerank`` between the cache stage and ``generate`` (one batched call inside the cache
stage's own timed call), so 5 re-ranked hits are compared with 5, never with a 20-hit retrieval.
"""

from __future__ import annotations

from typing import Any, Optional

from ragcost.records import QueryState, UsageRecord
from ragcost.stages.base import Stage, stage_registry

SHAPING = ("retrieve", "rerank")  # the stages that make the hits an answer is built on


class Verifier:
    """The stages that shaped a stored answer's hits, again: retrieve and rerank as the pipeline has them
    between the cache and generate. A check compares like with like (5 re-ranked hits with 5)."""

    def __init__(self, chain: list[Stage]) -> None:
        self.chain, self._warm = chain, False

    @property
    def names(self) -> list[str]:
        return [st.type for st in self.chain]

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        if not self._warm:
            for st in self.chain:
                getattr(st, "warm_up", lambda: None)()
            self._warm = True
        for st in self.chain:
            batch = st.run(batch, usage)
        return batch


def build_verifier(ctx, stages: list[dict[str, Any]], cache_name: str) -> Optional[Verifier]:
    """The hit-shaping stages after this cache stage and before generate (None when there are none)."""
    start = next((i for i, st in enumerate(stages) if st["type"] == "cache" and (st.get("name") or "cache") == cache_name), -1)
    chain: list[Stage] = []
    for i, spec in enumerate(stages[start + 1:]):
        if spec["type"] in ("generate", "route", "cache_write"):
            break
        if spec["type"] not in SHAPING:
            continue
        cls = stage_registry.get(spec["type"])
        params = {k: v for k, v in spec.items() if k != "type"}
        if spec["type"] == "retrieve":
            params["fetch_text"] = False
        chain.append(cls(cls.Params.model_validate({**params, "name": f"cache-verify-{spec['type']}-{i}"}), ctx))
    if not any(st.type == "retrieve" for st in chain):
        return None
    return Verifier(chain)
