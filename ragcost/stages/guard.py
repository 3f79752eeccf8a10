"""Guardrails as a costed stage: run named checks on the query, the retrieved context or the answer.

```yaml
- {type: guard, on: query, checks: [pii, prompt_injection]}          # each check's default policy
- {type: guard, on: context, policy: drop, checks: [prompt_injection]}
- {type: guard, on: answer, checks: [{check: grounded, threshold: 0.55, policy: block}]}
- {type: guard, on: query, checks: [{check: budget, resource: openai-gpt-4o-mini, limit_usd: 0.002, context_tokens: 1500}]}
```

Policies: ``block`` sets ``s.error = "blocked by guard <check>: <reason>"`` (later stages skip the
query; a PII block also redacts the text, so the ledger never keeps what was refused); ``redact``
replaces what was found (query text, chunk text and title, or answer); ``drop`` removes flagged
chunks from the context; ``flag`` only records. Every finding goes to ``s.findings``; the
stage reports counts on ``usage.notes["guard"]``; the runner times and prices the call.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import Field, ValidationError, model_validator

from ragcost.config.base import one_line
from ragcost.guards import guard_registry
from ragcost.guards.base import Finding, Guard, Policy, Target
from ragcost.records import QueryState, UsageRecord
from ragcost.stages.base import Stage, StageParams, stage_registry


class GuardStageParams(StageParams):
    checks: list[Union[str, dict[str, Any]]] = Field(
        min_length=1, description="check names, or {check: NAME, ...its params, policy: ...} (known: pii, prompt_injection, grounded, budget)")
    on: Target = Field("query", description="query (before retrieval), context (the retrieved chunks) or answer (after generation)")
    policy: Optional[Policy] = Field(None, description="block | redact | flag | drop for every check; default: each check's own")
    reembed: bool = Field(True, description="re-embed a query whose text was redacted, so retrieval searches what flows on")
    escalate_to: Optional[str] = Field(None, description="on: answer: a route target (e.g. large) that answers again instead of blocking (a grounded check on the small target's answer)")

    @model_validator(mode="after")
    def _escalate_on_answer(self) -> "GuardStageParams":
        if self.escalate_to and self.on != "answer":
            raise ValueError(f"escalate_to re-answers a flagged answer, so it needs on: answer (this stage is on: {self.on})")
        if self.escalate_to and not self.target:
            raise ValueError(f"escalate_to: {self.escalate_to} needs target: (the route target whose answers this guard checks, e.g. small)")
        return self

    @model_validator(mode="after")
    def _checks_fit(self) -> "GuardStageParams":
        for i, spec in enumerate(self.checks):
            build_check(spec, self, where=f"checks.{i}")
        return self


def build_check(spec: Union[str, dict[str, Any]], stage: GuardStageParams, ctx=None, where: str = "checks") -> tuple[Guard, str]:
    """A guard instance and the policy it runs under; a ValueError names what to fix."""
    if isinstance(spec, str):
        name, opts = spec, {}
    else:
        opts = dict(spec)
        name = opts.pop("check", None)
        if not isinstance(name, str):
            raise ValueError(f"{where}: a check given as a mapping needs 'check: NAME' (installed: {guard_registry.known()})")
    if name not in guard_registry:
        raise ValueError(f"{where}: unknown guard check {name!r}; installed: {guard_registry.known()}")
    cls = guard_registry.get(name)
    try:
        params = cls.Params.model_validate(opts)
    except ValidationError as e:
        raise ValueError(f"{where} ({name}).{one_line(e, known=list(cls.Params.model_fields))}") from None
    if stage.on not in cls.targets:
        raise ValueError(f"{where}: check {name!r} runs on {' or '.join(cls.targets)}, not on {stage.on!r}; put it in a guard stage with on: {cls.targets[0]}")
    policy = params.policy or stage.policy or cls.default_policy
    if policy == "drop" and stage.on != "context":
        raise ValueError(f"{where}: policy 'drop' removes retrieved chunks, so it needs on: context (this stage is on: {stage.on})")
    if policy not in cls.policies:
        raise ValueError(f"{where}: check {name!r} cannot {policy!r}; its policies: {', '.join(cls.policies)}")
    return cls(params, ctx), policy


@stage_registry.register("guard")
class GuardStage(Stage):
    type = "guard"
    Params = GuardStageParams
    optional = True

    @classmethod
    def answer_checks(cls, params: GuardStageParams) -> list[str]:
        if params.on != "answer":
            return []
        return [c if isinstance(c, str) else (c.get("check") if isinstance(c, dict) else getattr(c, "check", None))
                for c in params.checks or []]

    @classmethod
    def label(cls, params: GuardStageParams) -> str:
        if params.name:
            return params.name
        checks = [c if isinstance(c, str) else c.get("check", "?") for c in params.checks]
        return f"guard ({params.on}: {', '.join(checks)})"

    def holds_answer(self) -> bool:
        """On the answer, a check that may block or rewrite it (or an escalation): not one that only flags."""
        return self.params.on == "answer" and bool(
            self.params.escalate_to or any(policy != "flag" for _, policy in self.checks))

    def sentence_checks(self) -> Optional[list]:
        """Its blocking checks on the answer that judge a sentence at a time; None when one cannot (or it escalates)."""
        if self.params.on != "answer":
            return []
        if self.params.escalate_to:
            return None
        out = []
        for guard, policy in self.checks:
            if policy == "flag":
                continue
            if policy != "block" or not getattr(guard, "per_sentence", False):
                return None
            out.append(guard)
        return out

    def __init__(self, params: GuardStageParams, ctx) -> None:
        super().__init__(params, ctx)
        self.checks = [build_check(spec, params, ctx) for spec in params.checks]

    @property
    def name(self) -> str:
        return self.params.name or f"guard:{self.params.on}"

    def warm_up(self) -> None:
        for guard, _ in self.checks:
            guard.warm_up()

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        on = self.params.on
        counts = {"checked": 0, "flagged": 0, "blocked": 0, "redacted": 0, "dropped": 0}
        findings: dict[str, int] = {}
        redacted_queries: list[QueryState] = []
        for guard, policy in self.checks:
            active = [s for s in batch if s.error is None and self.accepts(s)]
            if not active:
                break
            counts["checked"] += len(active)
            results = guard.check(active, on)
            if own := guard.stage_notes():
                usage.notes[guard.name] = own
            for s, found in zip(active, results):
                if not found:
                    continue
                findings[guard.name] = findings.get(guard.name, 0) + len(found)
                notes = s.findings
                for f in found:
                    doc_id = s.hits[f.hit].doc_id if f.hit is not None and f.hit < len(s.hits) else None
                    notes.append({**f.note(doc_id), "policy": policy})
                if self.params.escalate_to and policy in ("flag", "block"):
                    # The small target's answer failed its check: the next target answers again, priced.
                    s.escalate(self.name, self.params.escalate_to, f"guard {guard.name}: {found[0].reason}")
                    counts["escalated"] = counts.get("escalated", 0) + 1
                    continue
                if policy == "flag":
                    counts["flagged"] += 1
                    continue
                if policy in ("redact", "block") and "redact" in guard.policies:
                    if self._redact(s, guard, found) and on == "query":
                        redacted_queries.append(s)
                    counts["redacted"] += policy == "redact"
                if policy == "drop":
                    gone = {f.hit for f in found if f.hit is not None}
                    s.hits = [h for i, h in enumerate(s.hits) if i not in gone]
                    counts["dropped"] += len(gone)
                if policy == "block":
                    s.error = f"blocked by guard {guard.name}: {found[0].reason}"
                    counts["blocked"] += 1
        self._reembed([s for s in redacted_queries if s.error is None], usage)
        usage.notes["guard"] = counts
        if on == "answer":  # what each query made the checks read: its answer's characters (sentences x length)
            usage.work = {s.id: len(s.answer or "") for s in batch}
        if findings:
            usage.notes["findings"] = findings
        return batch

    def _redact(self, s: QueryState, guard: Guard, found: list[Finding]) -> bool:
        """Apply ``guard.redact`` where it found something; True when the query text changed."""
        on = self.params.on
        if on == "query":
            new = guard.redact(s.text)
            changed, s.text = new != s.text, new
            return changed
        if on == "answer" and s.answer:
            s.answer = guard.redact(s.answer)
        if on == "context":
            for i in {f.hit for f in found if f.hit is not None}:
                h = s.hits[i]
                h.text, h.title = guard.redact(h.text), guard.redact(h.title or "")
        return False

    def _reembed(self, states: list[QueryState], usage: UsageRecord) -> None:
        # The implicit embed stage ran before this guard; what flows on is the redacted text.
        states = [s for s in states if s.vector is not None]
        if not states or not self.params.reembed or self.ctx is None:
            return
        from ragcost.stages.embed import EmbedQueries

        scratch = UsageRecord(stage=self.name, resource=self.resource, items=len(states))
        EmbedQueries(EmbedQueries.Params(), self.ctx).run(states, scratch)
        usage.input_tokens = (usage.input_tokens or 0) + (scratch.input_tokens or 0)
        usage.notes["reembedded"] = {"queries": len(states)}
