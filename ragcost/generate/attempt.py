"""One request to one backend, as measured: latency, tokens from the server's usage, success or error.

Modelled on vLLM's benchmark client (RequestFuncOutput): a failed request is recorded, not
raised. Definitions follow ``vllm bench serve``: TTFT is the time to the first chunk with
content; ITL the gaps between content chunks; TPOT = (e2e - TTFT) / (output_tokens - 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

# Where the token counts came from.
USAGE_SERVER = "server"  # the final usage chunk / response body
USAGE_PARTIAL = "partial"  # the last continuous-usage chunk before the stream broke
# (no usage at all: the generate stage counts or estimates the tokens, see ragcost.generate.accounting)
USAGE_NONE = "none"  # nothing was generated (refused connection, HTTP error)
USAGE_LOCAL = "local"  # in-process: counted by the engine or the extractive backend itself


@dataclass
class Attempt:
    backend: str  # label of the backend in the chain
    resource: str
    try_no: int = 1  # 1 = first try of this backend, 2.. = retries
    fallback: bool = False  # a backend after the first in the chain
    position: int = 0  # index of the backend in the chain
    ok: bool = False
    error: Optional[str] = None
    retryable: bool = False
    status: Optional[int] = None  # HTTP status when there was one
    text: str = ""
    prompt_tokens: Optional[int] = None  # all input tokens, cached included
    cached_tokens: Optional[int] = None  # None = the server did not say
    output_tokens: Optional[int] = None
    usage_source: str = USAGE_NONE
    chunks: int = 0  # content chunks received
    start: float = 0.0  # perf_counter at send
    end: float = 0.0
    ttft: Optional[float] = None
    itl: list[float] = field(default_factory=list)
    endpoint: str = ""  # the server (base_url + model) or in-process engine that served it: its busy period
    tokens_estimated: bool = False  # counts were counted or estimated here, not reported by the server
    # What this attempt used of an engine call it shared with others (an in-process batch, whose every
    # request starts and ends with the call), when the backend can tell; its busy-period share goes by
    # this instead of its duration when every attempt of the period has one. ``work_unit`` names it.
    work: Optional[float] = None
    work_unit: str = ""

    @property
    def e2e(self) -> float:
        return self.end - self.start

    @property
    def tpot(self) -> Optional[float]:
        if self.ttft is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    @property
    def uncached_input(self) -> Optional[int]:
        if self.prompt_tokens is None:
            return None
        return self.prompt_tokens - (self.cached_tokens or 0)

    def set_usage(self, usage: dict, source: str) -> None:
        """Take prompt/completion/cached counts from an OpenAI-style ``usage`` object."""
        self.prompt_tokens = usage.get("prompt_tokens")
        self.output_tokens = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        self.cached_tokens = int(cached) if cached is not None else None  # absent = unknown, never 0
        self.usage_source = source


class AttemptError(Exception):
    """Raised inside the retry loop so tenacity can decide; carries the recorded attempt."""

    def __init__(self, attempt: Attempt):
        super().__init__(attempt.error)
        self.attempt = attempt
