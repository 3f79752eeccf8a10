"""Backend ``vllm-offline``: in-process ``vllm.LLM`` on a GPU machine (extra ``vllm``), batched, same accounting.

Requests that arrive within ``batch_window_s`` of each other are generated in one
``LLM.generate`` call, so the engine batches them as the server would.
"""

from __future__ import annotations

import asyncio
from time import perf_counter
from typing import Any, Optional

from ragcost.errors import DependencyError
from ragcost.generate.attempt import USAGE_LOCAL, Attempt
from ragcost.generate.base import Generator, OnText
from ragcost.generate.params import BackendParams
from ragcost.generate.prompt import Prompt
from ragcost.generate.registry import generator_registry

DEFAULT_WINDOW_S = 0.005  # collect at least this long, so concurrent requests share one LLM.generate


def load_llm(params: BackendParams):
    try:
        from vllm import LLM  # heavy; only on machines with the `vllm` extra
    except ImportError as e:
        raise DependencyError(
            f"generate backend {params.backend_name!r} (vllm-offline) needs vLLM in this environment: "
            f"pip install 'ragcost[vllm]' on a GPU machine, or use backend: vllm with a running server ({e})"
        ) from None
    # Per-request engine stats (when each request was scheduled, its last token) are what split a
    # batch's engine time between its requests; vLLM keeps them only with stats on (its LLM's default
    # is off). A user's own ``disable_log_stats`` stands; the split then goes by tokens.
    return LLM(model=params.model, **{"disable_log_stats": False, **params.engine_args})


def fill_from_output(att: Attempt, out: Any) -> Attempt:
    """Tokens and timings from a vLLM ``RequestOutput`` (duck-typed; metrics may be absent)."""
    comp = out.outputs[0]
    att.text = comp.text
    att.prompt_tokens = len(out.prompt_token_ids or [])
    att.output_tokens = len(comp.token_ids or [])
    cached = getattr(out, "num_cached_tokens", None)
    att.cached_tokens = int(cached) if cached is not None else None
    att.usage_source = USAGE_LOCAL
    att.chunks = 1 if att.text else 0
    m = getattr(out, "metrics", None)
    first = getattr(m, "first_token_time", None) if m is not None else None
    arrival = getattr(m, "arrival_time", None) if m is not None else None
    latency = getattr(m, "first_token_latency", None) if m is not None else None  # vLLM's V1 engine
    if first is not None and arrival is not None:
        att.ttft = max(0.0, float(first) - float(arrival))
    elif _number(latency) and latency > 0:
        att.ttft = float(latency)
    att.ok = True
    return att


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def engine_work(outs: list) -> tuple[list[float], str]:
    """What each request of one ``LLM.generate`` used of it, and in what unit.

    ``engine_s``: the seconds from when the engine scheduled the request to its last token (vLLM's V1
    per-request stats, ``scheduled_ts`` and ``last_token_ts``, kept when stats are on): the engine
    steps it was part of. Without them, ``decode_steps``: its output tokens + 1 (its prefill step),
    the steps it was part of when the batch ran together; this leaves out how long each prompt's
    prefill took, so a long prompt with a short answer is undercharged against the engine-seconds
    rule (docs/tasks/vllm.md)."""
    spans: list[float] = []
    for o in outs:
        m = getattr(o, "metrics", None)
        s, e = getattr(m, "scheduled_ts", None), getattr(m, "last_token_ts", None)
        if not (_number(s) and _number(e) and s > 0 and e >= s):
            break
        spans.append(float(e - s))
    else:
        if outs and sum(spans) > 0:
            return spans, "engine_s"
    return [float(len(o.outputs[0].token_ids or []) + 1) for o in outs], "decode_steps"


class OfflineBatcher:
    """Collects requests for a short window and generates them together in a worker thread."""

    def __init__(self, llm: Any, params: BackendParams, window_s: float):
        self.llm, self.params, self.window_s = llm, params, window_s
        self._pending: list[tuple[str, Attempt, asyncio.Future]] = []
        self._flush: Optional[asyncio.Task] = None

    def sampling(self):
        from vllm import SamplingParams

        return SamplingParams(max_tokens=self.params.max_tokens, temperature=self.params.temperature, **self.params.extra_body)

    async def generate(self, text: str, att: Attempt) -> Attempt:
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((text, att, fut))
        if self._flush is None:
            self._flush = asyncio.create_task(self._run_after_window())
        return await fut

    async def _run_after_window(self) -> None:
        await asyncio.sleep(self.window_s)
        batch, self._pending, self._flush = self._pending, [], None
        start = perf_counter()
        for _, att, _ in batch:
            att.start = start
        try:
            outs = await asyncio.to_thread(self.llm.generate, [t for t, _, _ in batch], self.sampling())
        except Exception as e:  # an engine fault fails every request of the batch, as data
            for _, att, fut in batch:
                att.end, att.error = perf_counter(), f"vllm.LLM.generate: {type(e).__name__}: {e}"
                fut.set_result(att)
            return
        end = perf_counter()
        # Every request of the call started and ended with it: their durations are equal, so the
        # call's busy period is split by what each used of the engine (accounting.shares).
        work, unit = engine_work(list(outs)) if len(outs) == len(batch) else ([], "")
        for i, ((_, att, fut), out) in enumerate(zip(batch, outs)):
            att.end = end
            if work:
                att.work, att.work_unit = work[i], unit
            fut.set_result(fill_from_output(att, out))


@generator_registry.register("vllm-offline")
class VllmOffline(Generator):
    """The engine loads once, at warm-up; each batch gets a batcher that collects for the stage's window."""

    aligns_starts = False  # the batcher collects its own window

    def __init__(self, params: BackendParams) -> None:
        super().__init__(params)
        self.llm: Any = None
        self._batcher: Optional[OfflineBatcher] = None

    @classmethod
    def check(cls, params: BackendParams) -> None:
        if not params.model:
            raise ValueError(f"backend {params.backend!r} needs model: (a local model path or a Hugging Face name)")

    @classmethod
    def default_label(cls, params: BackendParams) -> str:
        return params.backend  # the model is a path: too long for a report

    def warm_up(self) -> None:
        if self.llm is None:
            self.llm = load_llm(self.params)

    async def open(self, concurrency: int, window_s: float) -> None:
        self.warm_up()
        self._batcher = OfflineBatcher(self.llm, self.params, window_s or DEFAULT_WINDOW_S)

    async def aclose(self) -> None:
        self._batcher = None

    async def generate(self, prompt: Prompt, attempt: Attempt, on_text: OnText) -> None:
        if self._batcher is None:
            raise RuntimeError(f"generate backend {self.params.backend_name!r}: call open() before generate()")
        await self._batcher.generate(prompt.text(), attempt)
        if attempt.ok:
            on_text(attempt.text)
