"""After generation: every answer sentence must be supported by the retrieved context.

A sentence is supported when its embedding (the pipeline's embedder, at the model's native
dimension) has cosine similarity at or above ``threshold`` with some sentence or chunk of the
context. All sentences of a batch are embedded in one call, the context in another.
"""

from __future__ import annotations

import re

import numpy as np
from pydantic import Field

from ragcost.errors import ConfigError
from ragcost.guards.base import Finding, Guard, GuardParams, guard_registry

_CITATION = re.compile(r"\s*\[[^\]]{1,40}\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n+")


def sentences(text: str, min_chars: int = 12) -> list[tuple[int, int, str]]:
    """(start, end, sentence without citation markers) for each sentence of at least ``min_chars``."""
    out, pos = [], 0
    for m in list(_SENTENCE_END.finditer(text)) + [None]:
        end = m.start() if m else len(text)
        raw = text[pos:end]
        clean = _CITATION.sub("", raw).strip()
        if len(clean) >= min_chars:
            lead = len(raw) - len(raw.lstrip())
            out.append((pos + lead, end, clean))
        pos = m.end() if m else len(text)
    return out


class GroundedParams(GuardParams):
    threshold: float = Field(0.5, ge=-1, le=1, description="cosine similarity a sentence needs with some context passage")
    min_chars: int = Field(12, ge=1, description="shorter sentences (\"Yes.\") are not checked")
    cited_only: bool = Field(False, description="support must come from the hits the answer cites")


@guard_registry.register("grounded")
class GroundedGuard(Guard):
    """Lists unsupported answer sentences; flags or blocks."""

    name = "grounded"
    Params = GroundedParams
    targets = ("answer",)
    policies = ("flag", "block")
    default_policy = "flag"

    def warm_up(self) -> None:
        self._embedder().warm_up()

    def _embedder(self):
        if self.ctx is None:
            raise ConfigError("guard 'grounded' needs a context with the embedder; construct it with (params, ctx)")
        return self.ctx.embedder

    def check(self, batch, on: str) -> list[list[Finding]]:
        emb = self._embedder()
        per_state, all_sents, all_ctx = [], [], []
        for s in batch:
            sents = sentences(s.answer or "", self.params.min_chars)
            hits = [h for h in s.hits if not self.params.cited_only or h.doc_id in set(s.citations)]
            ctx = []
            for h in hits:
                ctx.append(h.text)
                ctx.extend(t for _, _, t in sentences(h.text, self.params.min_chars))
            per_state.append((sents, len(all_sents), len(all_ctx), len(ctx)))
            all_sents.extend(t for _, _, t in sents)
            all_ctx.extend(ctx)
        if not all_sents:
            return [[] for _ in batch]
        sv = emb.embed(all_sents)
        cv = emb.embed(all_ctx) if all_ctx else np.zeros((0, sv.shape[1]), np.float32)
        out: list[list[Finding]] = []
        for sents, s0, c0, nc in per_state:
            found = []
            ctx = cv[c0:c0 + nc]
            for i, (a, b, text) in enumerate(sents):
                best = float((ctx @ sv[s0 + i]).max()) if nc else -1.0
                if best < self.params.threshold:
                    found.append(Finding(self.name, "unsupported_sentence", 1.0 - max(best, 0.0), on="answer", span=(a, b),
                                         match=text[:300], reason=f"sentence not supported by the context (best similarity {best:.2f} < {self.params.threshold})"))
            out.append(found)
        return out
