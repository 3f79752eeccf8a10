"""Generate an answer from the retrieved chunks, through a chain of backends with retries and fallback.

The chain is the stage's own backend followed by its ``fallback`` entries (e.g. large vLLM ->
small vLLM -> extractive). Each backend is tried with exponential backoff and jitter on
retryable faults (timeouts, refused or cut connections, 429/5xx, malformed streams); then the
next backend. Queries of a batch run concurrently up to ``concurrency``, so a vLLM server's
continuous batching sees them together.

Every attempt, failed or not, becomes its own usage record, appended to its query's declared
``QueryState.usage`` (the runner prices those instead of the query's share of the call), so $ per
successful request includes retries and fallbacks. The accounting rules are in
:mod:`ragcost.generate.accounting`: tokens counted when the server did not say, busy periods per
endpoint shared by duration, and the stage's time outside the attempts as ``<stage>/overhead``
records on the pipeline's resource.
"""

from __future__ import annotations

import asyncio
import json
from time import perf_counter
from typing import Callable, Optional

from pydantic import Field

from ragcost.generate import Attempt, BackendParams, Generator, Prompt, generator_registry
from ragcost.generate.accounting import fill_missing_usage, overhead_records, period_fields
from ragcost.generate.attempt import AttemptError
from ragcost.generate.abstain import NO_ANSWER, is_refusal
from ragcost.generate.clip import Clip
from ragcost.generate.prompt import build_prompt, cited, token_counter
from ragcost.records import QueryState, UsageRecord
from ragcost.stages.base import Stage, StageParams, stage_registry

# on_event(state, kind, payload): kind is "text" (a streamed piece), "retry", "fallback", "escalated" or "failed";
# "sources" (a JSON list of the document ids [1], [2]... cite, before a backend starts) is for a consumer that
# checks the stream as it comes (ragcost.serve.gate), and is not shown to people.
OnEvent = Callable[[QueryState, str, str], None]


class GenerateParams(StageParams, BackendParams):
    concurrency: int = Field(8, ge=1, le=1024, description="requests in flight at once (per stage call)")
    batch_window_ms: float = Field(0.0, ge=0, description="start requests only on these boundaries (vllm-offline: collect this long), so more land in one scheduler step")
    fallback: list[BackendParams] = Field(default_factory=list, description="backends tried in order when the previous one fails")
    escalate_to: Optional[str] = Field(None, description="a route target (e.g. large) that takes the query when every backend here fails; its failed attempts stay priced")
    abstain_unknown: Optional[float] = Field(
        None, gt=0, le=1, description="abstain, calling no backend, when this share of the question's content words "
        "never occurs in the corpus (a question about another language, library or person; the demo sets 0.25, "
        "chosen on labelled questions: docs/concepts/useful-documents.md); default off")


@stage_registry.register("generate")
class Generate(Stage):
    type = "generate"
    Params = GenerateParams
    makes_answer = True

    def __init__(self, params: GenerateParams, ctx) -> None:
        super().__init__(params, ctx)
        self.on_event: Optional[OnEvent] = None
        own = {k: getattr(params, k) for k in BackendParams.model_fields}
        self._chain = [BackendParams(**own), *params.fallback]
        # One backend object per entry of the chain, built by its registered class (cheap: nothing loads here).
        self.generators: list[Generator] = [generator_registry.get(b.backend)(b) for b in self._chain]
        self._counters: list = [None] * len(self._chain)  # token counters, set at warm-up
        self._vocab = None  # the corpus's words, for abstain_unknown (loaded at warm-up)

    @property
    def name(self) -> str:
        # Two generate stages serve two route targets: each is named after its target in reports.
        return self.params.name or (f"generate:{self.params.target}" if self.params.target else "generate")

    # ---- the chain ---------------------------------------------------------------------------
    def chain(self) -> list[BackendParams]:
        return list(self._chain)

    def resource_of(self, i: int, b: BackendParams) -> str:
        if b.resource:
            return b.resource
        return self.resource if i == 0 else self.ctx.resource

    def label_of(self, i: int, b: BackendParams) -> str:
        return self.name if i == 0 else f"{self.name}/{b.backend_name}"

    def warm_up(self) -> None:
        # The stage's time outside its attempts is priced on the pipeline's resource.
        self.ctx.price_book.resource(self.ctx.resource, f"{self.ctx.path}: stage {self.name!r} (time outside its attempts)")
        for i, (b, gen) in enumerate(zip(self._chain, self.generators)):
            self.ctx.price_book.resource(self.resource_of(i, b), f"{self.ctx.path}: stage {self.name!r} backend {b.backend_name!r}")
            self._counters[i] = token_counter(b)
            gen.warm_up()  # loads a model, checks an API key: fails now, not after the first batch
        if self.params.abstain_unknown is not None:
            self._vocabulary()

    def prepare(self) -> Optional[str]:
        """With ``abstain_unknown``: the corpus's vocabulary, kept beside the index (built once, by `ragcost index`)."""
        if self.params.abstain_unknown is None:
            return None
        from ragcost.generate.vocabulary import load_or_build

        self._vocab, line = load_or_build(self.ctx)
        return f"vocabulary for abstain_unknown, {line}"

    def _vocabulary(self):
        if self._vocab is None:
            from ragcost.generate.vocabulary import load_or_build

            self._vocab, _ = load_or_build(self.ctx)
        return self._vocab

    def _unknown_terms(self, state: QueryState) -> Optional[list[str]]:
        """The question's terms the corpus never uses, when they reach ``abstain_unknown`` of its content words."""
        if self.params.abstain_unknown is None:
            return None
        unknown, n = self._vocabulary().unknown(state.text)
        return unknown if n and len(unknown) / n >= self.params.abstain_unknown else None

    # ---- running -----------------------------------------------------------------------------
    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        t0 = perf_counter()
        per_state = _run_coroutine(self._generate_all(batch))
        stage_wall = perf_counter() - t0
        records = self.attempt_records(batch, per_state)
        for state, rec in records:  # each attempt is its query's own record: the runner prices these
            state.usage.append(rec)
        attempts = [a for atts in per_state for a in atts]
        for state, rec in zip(batch, overhead_records(self.name, self.ctx.resource, stage_wall, attempts, len(batch))):
            state.usage.append(rec)  # the stage's own time outside the attempts, on the pipeline's resource
        _aggregate(usage, [r for _, r in records])
        return batch

    async def _generate_all(self, batch: list[QueryState]) -> list[list[Attempt]]:
        sem = asyncio.Semaphore(self.params.concurrency)
        t0 = perf_counter()
        try:
            for gen in self.generators:
                await gen.open(self.params.concurrency, self.params.batch_window_ms / 1000)
            return list(await asyncio.gather(*(self._one(s, self._chain, sem, t0) for s in batch)))
        finally:
            await asyncio.gather(*(gen.aclose() for gen in self.generators))

    async def _one(self, state: QueryState, chain: list[BackendParams], sem, t0: float) -> list[Attempt]:
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

        attempts: list[Attempt] = []
        unknown = self._unknown_terms(state)
        if unknown:  # about what the corpus never names: no backend is asked (nor paid)
            state.answer, state.citations = NO_ANSWER, []
            self._note(state, None, None, attempts)
            state.generation.update(abstained=True, unknown_terms=unknown, finish_reason="stop")
            self._emit(state, "sources", "[]")
            self._emit(state, "text", NO_ANSWER)
            return attempts
        for i, b in enumerate(chain):
            prompt = build_prompt(state.text, state.hits, b)
            if self.on_event is not None:
                self._emit(state, "sources", json.dumps([h.doc_id for h in prompt.sources]))
            native = self.generators[i].request_options
            prompt.options = {k: v for k, v in state.options.items() if k in native}
            retrying = AsyncRetrying(
                stop=stop_after_attempt(b.retry.attempts),
                wait=wait_exponential_jitter(initial=b.retry.initial_s, max=b.retry.max_s, jitter=b.retry.jitter_s),
                retry=retry_if_exception(lambda e: isinstance(e, AttemptError) and e.attempt.retryable),
                reraise=True,
            )
            try:
                async for t in retrying:
                    with t:
                        att = Attempt(backend=b.backend_name, resource=self.resource_of(i, b),
                                      try_no=t.retry_state.attempt_number, fallback=i > 0, position=i,
                                      endpoint=self.generators[i].endpoint)
                        clip = Clip.of(state.options, native, self._count(i))
                        async with sem:
                            await self._align(t0, self.generators[i])
                            await self._call(self.generators[i], prompt, att, state, clip)
                        fill_missing_usage(att, prompt, self._count(i), exact=b.tokenizer is not None)
                        attempts.append(att)
                        if not att.ok:
                            if att.retryable and att.try_no < b.retry.attempts:
                                self._emit(state, "retry", f"{b.backend_name}: {att.error}")
                            raise AttemptError(att)
                self._finish(state, b, prompt, att, attempts)
                state.generation["finish_reason"] = _finish_reason(clip, state.options, native, att)
                return attempts
            except AttemptError as e:
                nxt = chain[i + 1].backend_name if i + 1 < len(chain) else None
                if nxt:
                    self._emit(state, "fallback", f"{b.backend_name} failed ({e.attempt.error}); falling back to {nxt}")
        last = attempts[-1].error if attempts else "no backend"
        self._note(state, None, None, attempts)
        if self.params.escalate_to:  # mis-routed or down: the next target answers, and both are priced
            state.escalate(self.name, self.params.escalate_to, f"every backend of {self.name!r} failed; last error: {last}")
            self._emit(state, "escalated", f"{self.name} failed ({last}); escalating to {self.params.escalate_to}")
            return attempts
        state.fail(self.name, f"stage {self.name!r}: every backend failed ({', '.join(b.backend_name for b in chain)}); last error: {last}")
        self._emit(state, "failed", state.error)
        return attempts

    def _count(self, i: int):
        if self._counters[i] is None:  # run without warm_up (a test, a notebook)
            self._counters[i] = token_counter(self._chain[i])
        return self._counters[i]

    async def _align(self, t0: float, gen: Generator) -> None:
        w = self.params.batch_window_ms / 1000
        if w > 0 and gen.aligns_starts:
            await asyncio.sleep((-(perf_counter() - t0)) % w)

    async def _call(self, gen: Generator, prompt: Prompt, att: Attempt, state: QueryState, clip: Optional[Clip] = None) -> None:
        """One attempt through its backend; a backend that raises anyway is recorded as a failed attempt.

        With a ``clip`` (the request's stop / max_tokens) only the clipped text leaves and is kept."""
        sent = perf_counter()

        def on_text(piece: str) -> None:
            out = piece if clip is None else clip.feed(piece)
            if out:
                self._emit(state, "text", out)

        try:
            await gen.generate(prompt, att, on_text)
            if clip is not None and att.ok and att.text is not None:
                att.text, rest = clip.close(att.text)
                if rest:
                    self._emit(state, "text", rest)
        except Exception as e:  # a plugin's bug must not sink the batch: data, then the fallback
            att.ok, att.retryable = False, False
            att.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'raised'} (from backend {gen.params.backend!r})"
        if not att.start:  # a backend that does not time itself is timed here, for the busy-time share
            att.start = sent
        if not att.end:
            att.end = perf_counter()

    def _emit(self, state: QueryState, kind: str, payload: str) -> None:
        if self.on_event is not None:
            self.on_event(state, kind, payload)

    def _finish(self, state: QueryState, b: BackendParams, prompt: Prompt, att: Attempt, attempts: list[Attempt]) -> None:
        state.answer = att.text
        refused = is_refusal(att.text)
        state.citations = [] if refused else cited(att.text, prompt.sources)  # an abstaining answer cites nothing
        self._note(state, att, prompt, attempts)
        state.generation["abstained"] = refused

    def _note(self, state: QueryState, att: Optional[Attempt], prompt: Optional[Prompt], attempts: list[Attempt]) -> None:
        ms = lambda x: None if x is None else round(x * 1000, 3)  # noqa: E731
        state.generation = {
            "backend": att.backend if att else None,
            "attempts": len(attempts),
            "failed_attempts": sum(1 for a in attempts if not a.ok),
            "ttft_ms": ms(att.ttft) if att else None,
            "tpot_ms": ms(att.tpot) if att else None,
            "e2e_ms": ms(att.e2e) if att else None,
            "input_tokens": att.prompt_tokens if att else None,
            "cached_input_tokens": att.cached_tokens if att else None,
            "output_tokens": att.output_tokens if att else None,
            "tokens_estimated": att.tokens_estimated if att else False,
            "context_chunks": len(prompt.sources) if prompt else None,
            "context_dropped": prompt.dropped if prompt else None,
            "errors": [a.error for a in attempts if not a.ok],
        }

    # ---- accounting --------------------------------------------------------------------------
    def attempt_records(self, batch: list[QueryState], per_state: list[list[Attempt]]) -> list[tuple[QueryState, UsageRecord]]:
        """One usage record per attempt, with its busy period on its (resource, endpoint) and its share (``accounting``)."""
        chain = self.chain()
        labels = [self.label_of(i, b) for i, b in enumerate(chain)]
        periods = period_fields([a for atts in per_state for a in atts])
        out: list[tuple[QueryState, UsageRecord]] = []
        for state, atts in zip(batch, per_state):
            for a in atts:
                b = chain[a.position]
                fields = dict(periods[id(a)])
                basis = fields.pop("share_by")
                rec = UsageRecord(
                    stage=labels[a.position], resource=a.resource, items=1, calls=1,
                    retries=1 if a.try_no > 1 else 0, failures=0 if a.ok else 1,
                    input_tokens=a.uncached_input, cached_input_tokens=a.cached_tokens, output_tokens=a.output_tokens,
                    tokens_estimated=a.tokens_estimated, **fields, model=b.model or b.backend,
                    operation="chat" if b.api == "chat" else "text_completion", ttft_s=a.ttft, tpot_s=a.tpot, e2e_s=a.e2e,
                    notes={"backend": a.backend, "endpoint": a.endpoint, "try": a.try_no, "fallback": a.fallback,
                           "ok": a.ok, "error": a.error, "status": a.status, "usage": a.usage_source, "chunks": a.chunks,
                           "itl_mean_s": sum(a.itl) / len(a.itl) if a.itl else None, "share_by": basis},
                )
                out.append((state, rec))
        return out


def _finish_reason(clip: Optional[Clip], options: dict, native: frozenset, att: Attempt) -> str:
    """OpenAI's finish_reason: "length" when max_tokens cut the answer, else "stop"."""
    if clip is not None and clip.finish is not None:
        return clip.finish
    limit = options.get("max_tokens")
    if limit is not None and "max_tokens" in native and att.output_tokens is not None and att.output_tokens >= limit:
        return "length"
    return "stop"


def _aggregate(usage: UsageRecord, records: list[UsageRecord]) -> None:
    """The call's own record, summed over attempts (what a runner without per-attempt records prices)."""
    usage.retries = sum(r.retries for r in records)
    usage.tokens_estimated = any(r.tokens_estimated for r in records)
    usage.failures = sum(r.failures for r in records)
    for key in ("input_tokens", "output_tokens"):
        vals = [getattr(r, key) for r in records if getattr(r, key) is not None]
        setattr(usage, key, sum(vals) if vals else None)
    with_input = [r for r in records if r.input_tokens is not None]
    known = [r.cached_input_tokens for r in with_input if r.cached_input_tokens is not None]
    usage.cached_input_tokens = sum(known) if with_input and len(known) == len(with_input) else None


def _run_coroutine(coro):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from inside an event loop (a notebook): run ours on a worker thread.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()

