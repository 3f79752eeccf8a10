"""Which Chat Completions fields the pipeline honours, and the generation options of one request.

A field that would change the answer is honoured when every generator of every generate stage
can apply it (``stop`` and ``max_tokens`` always: the stage cuts any backend's text), and refused
with a 400 naming it otherwise; never silently ignored. Sampling fields (temperature, top_p,
seed) hold trivially for a deterministic backend (extractive), whose answer they cannot change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragcost.serve.errors import HTTPError
from ragcost.serve.models import ChatRequest

CLIPPED = frozenset({"stop", "max_tokens"})  # the generate stage cuts every backend's text
SAMPLING = frozenset({"temperature", "top_p", "seed"})
# Fields whose neutral value changes nothing; any other value needs a backend that applies it.
NEUTRAL = {"presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {}}


@dataclass(frozen=True)
class Capabilities:
    """What the pipeline's generators can apply; ``backends`` names them for the error messages."""

    supported: frozenset[str]
    backends: tuple[str, ...]

    @classmethod
    def of(cls, pipe: Any) -> "Capabilities":
        gens = [g for s in pipe.stages() if s.makes_answer for g in s.generators]
        names = tuple(sorted({g.params.backend for g in gens}))
        every = CLIPPED | SAMPLING | frozenset(NEUTRAL)
        if not gens:  # no answer to change
            return cls(every, names)
        ok = every
        for g in gens:
            own = CLIPPED | g.request_options | (SAMPLING if g.deterministic else frozenset())
            ok = ok & own
        return cls(ok, names)


def _refuse(param: str, why: str) -> HTTPError:
    return HTTPError(400, f"{param}: {why}", param, code="unsupported_parameter")


def generation_options(req: ChatRequest, caps: Capabilities) -> dict[str, Any]:
    """The options the generate stage applies (OpenAI's names); a 400 for what the pipeline cannot honour."""
    if req.n not in (None, 1):
        raise _refuse("n", "this pipeline gives one answer per request; send n=1 or leave it out")
    if req.logprobs:
        raise _refuse("logprobs", "the pipeline's generators return no log-probabilities; leave it out")
    if req.top_logprobs:
        raise _refuse("top_logprobs", "the pipeline's generators return no log-probabilities; leave it out")
    if req.response_format is not None and req.response_format.get("type") != "text":
        raise _refuse("response_format", f"only {{\"type\": \"text\"}} is supported (got {req.response_format.get('type')!r})")
    if req.tools or req.functions:
        param = "tools" if req.tools else "functions"
        raise _refuse(param, "the pipeline answers from retrieved passages and calls no tools; leave it out")
    for param in ("tool_choice", "function_call"):
        v = getattr(req, param)
        if v is not None and v not in ("none", "auto"):
            raise _refuse(param, "no tools can be called; send \"none\" or leave it out")
    if req.modalities is not None and set(req.modalities) - {"text"}:
        raise _refuse("modalities", "the pipeline answers in text only; send [\"text\"] or leave it out")
    for param in ("audio", "web_search_options", "reasoning_effort", "verbosity"):
        if getattr(req, param) is not None:
            raise _refuse(param, f"the pipeline's generators ({', '.join(caps.backends) or 'none'}) cannot apply it; leave it out")
    wanted: dict[str, Any] = {}
    limit = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if req.max_tokens is not None and req.max_completion_tokens is not None and req.max_tokens != req.max_completion_tokens:
        raise _refuse("max_tokens", "max_tokens and max_completion_tokens differ; send one of them")
    if limit is not None:
        wanted["max_tokens"] = limit
    if req.stop is not None:
        wanted["stop"] = [req.stop] if isinstance(req.stop, str) else list(req.stop)
    for param in ("temperature", "top_p", "seed"):
        if getattr(req, param) is not None:
            wanted[param] = getattr(req, param)
    for param, neutral in NEUTRAL.items():
        v = getattr(req, param)
        if v is not None and v != neutral:
            wanted[param] = v
    for param in wanted:
        if param not in caps.supported:
            raise _refuse(param, f"the pipeline's generators ({', '.join(caps.backends)}) cannot apply it; leave it out")
    return wanted
