"""OpenAI-compatible requests (vLLM server, hosted APIs) over httpx, streamed with SSE.

A request never raises for a server or network fault: it returns an :class:`Attempt` with
``ok=False``, the error, whether a retry may help, and whatever usage the server sent.
:class:`OpenAICompatible` is the base of the ``vllm`` and ``openai`` backends: one pooled
client per batch, sized to the stage's concurrency.
"""

from __future__ import annotations

import asyncio
import json
import os
from time import perf_counter
from typing import Any, ClassVar, Optional

from ragcost.errors import ConfigError
from ragcost.generate.attempt import USAGE_PARTIAL, USAGE_SERVER, Attempt
from ragcost.generate.base import Generator, OnText
from ragcost.generate.params import BackendParams
from ragcost.generate.prompt import Prompt

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class MalformedStream(Exception):
    """The server's event stream broke the protocol (bad JSON, an error event, no [DONE])."""


def endpoint(base_url: str, api: str) -> str:
    base = base_url.rstrip("/")
    return f"{base}/chat/completions" if api == "chat" else f"{base}/completions"


def request_body(params: BackendParams, prompt: Prompt, continuous_usage: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": params.model, "max_tokens": params.max_tokens, "temperature": params.temperature}
    if params.api == "chat":
        body["messages"] = prompt.messages()
    else:
        body["prompt"] = prompt.text()
    if params.stream:
        body["stream"] = True
        opts: dict[str, Any] = {"include_usage": True}
        if continuous_usage:
            opts["continuous_usage_stats"] = True  # vLLM: usage in every chunk
        body["stream_options"] = opts
    body.update(params.extra_body)
    body.update(prompt.options)  # one request's own (ragcost serve passes what its client asked)
    return body


def headers(params: BackendParams) -> dict[str, str]:
    if not params.api_key_env:
        return {}
    key = os.environ.get(params.api_key_env)
    if not key:
        raise ConfigError(f"generate backend {params.backend_name!r}: environment variable {params.api_key_env} is not set; "
                          f"export {params.api_key_env}=<your API key>")
    return {"Authorization": f"Bearer {key}"}


def _content(chunk: dict, api: str) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    c = choices[0]
    if api == "chat":
        return (c.get("delta") or c.get("message") or {}).get("content") or ""
    return c.get("text") or ""


async def _read_stream(resp, att: Attempt, api: str, on_text: Optional[OnText]) -> None:
    done = False
    last = att.start
    async for line in resp.aiter_lines():
        if not line or line.startswith(":"):
            continue
        if not line.startswith("data:"):
            continue  # event:/id:/retry: fields carry nothing for us
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise MalformedStream(f"chunk is not JSON: {data[:80]!r}") from None
        if "error" in chunk:
            err = chunk["error"]
            raise MalformedStream(f"server error in stream: {err.get('message', err) if isinstance(err, dict) else err}")
        if chunk.get("usage"):
            att.set_usage(chunk["usage"], USAGE_PARTIAL)
        piece = _content(chunk, api)
        if piece:
            now = perf_counter()
            if att.ttft is None:
                att.ttft = now - att.start
            else:
                att.itl.append(now - last)
            last = now
            att.chunks += 1
            att.text += piece
            if on_text is not None:
                on_text(piece)
    if not done:
        raise MalformedStream("stream ended before data: [DONE]")
    if att.usage_source == USAGE_PARTIAL:
        att.usage_source = USAGE_SERVER  # the last usage before [DONE] is the final one


async def _once(client, params: BackendParams, url: str, body: dict, att: Attempt, on_text: Optional[OnText]) -> None:
    att.start = perf_counter()
    if params.stream:
        async with client.stream("POST", url, json=body, headers=headers(params)) as resp:
            att.status = resp.status_code
            if resp.status_code >= 400:
                text = (await resp.aread()).decode("utf-8", "replace")
                raise _HTTPFault(resp.status_code, text)
            await _read_stream(resp, att, params.api, on_text)
    else:
        resp = await client.post(url, json=body, headers=headers(params))
        att.status = resp.status_code
        if resp.status_code >= 400:
            raise _HTTPFault(resp.status_code, resp.text)
        try:
            data = resp.json()
            att.text = _content(data, params.api)
        except (ValueError, AttributeError):
            raise MalformedStream(f"response is not JSON: {resp.text[:80]!r}") from None
        if data.get("usage"):
            att.set_usage(data["usage"], USAGE_SERVER)
        att.chunks = 1 if att.text else 0
        if on_text is not None and att.text:
            on_text(att.text)


class _HTTPFault(Exception):
    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {' '.join(body.split())[:200]}")
        self.status = status


async def complete(client, params: BackendParams, url: str, body: dict, att: Attempt, on_text: Optional[OnText] = None) -> Attempt:
    """POST ``body`` to ``url``; fill and return ``att`` (never raises for server or network faults)."""
    import httpx

    try:
        await asyncio.wait_for(_once(client, params, url, body, att, on_text), timeout=params.timeout_s)
        att.ok = True
    except _HTTPFault as e:
        att.error, att.status, att.retryable = str(e), e.status, e.status in RETRY_STATUS
    except MalformedStream as e:
        att.error, att.retryable = f"malformed stream: {e}", True
    except (asyncio.TimeoutError, httpx.TimeoutException) as e:
        att.error, att.retryable = f"timeout ({type(e).__name__}) after {perf_counter() - att.start:.1f}s", True
    except httpx.TransportError as e:  # refused, reset, cut mid-body
        att.error, att.retryable = f"{type(e).__name__}: {e or 'connection failed'}", True
    finally:
        att.end = perf_counter()
    return att  # counts the server did not send are left None: the stage counts them (ragcost.generate.accounting)


def make_client(concurrency: int, params: BackendParams):
    """One pooled async client per backend and batch; connection limits follow the stage's concurrency."""
    import httpx

    timeout = httpx.Timeout(params.timeout_s, connect=params.connect_timeout_s, read=params.read_timeout_s)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(timeout=timeout, limits=limits)


class OpenAICompatible(Generator):
    """A server that speaks OpenAI's /v1/chat/completions or /v1/completions, streamed with SSE."""

    default_base_url: ClassVar[Optional[str]] = None  # None: the params must give base_url
    continuous_usage: ClassVar[bool] = False  # ask for usage in every chunk unless the params say
    request_options: ClassVar[frozenset[str]] = frozenset(
        {"temperature", "top_p", "seed", "stop", "max_tokens", "presence_penalty", "frequency_penalty", "logit_bias"})

    def __init__(self, params: BackendParams) -> None:
        super().__init__(params)
        self._client = None

    @classmethod
    def check(cls, params: BackendParams) -> None:
        if not params.model:
            raise ValueError(f"backend {params.backend!r} needs model: (the served model name)")
        if not (params.base_url or cls.default_base_url):
            raise ValueError(f"backend {params.backend!r} needs base_url:, e.g. http://127.0.0.1:8000/v1")

    @property
    def endpoint(self) -> str:
        """The server and the model it serves: attempts on one endpoint share its busy periods."""
        return f"{(self.params.base_url or self.default_base_url or '').rstrip('/')} model={self.params.model}"

    @property
    def url(self) -> str:
        return endpoint(self.params.base_url or self.default_base_url or "", self.params.api)

    @property
    def wants_continuous_usage(self) -> bool:
        own = self.params.continuous_usage
        return self.continuous_usage if own is None else own

    def warm_up(self) -> None:
        headers(self.params)  # a missing API key fails now, not after the first batch

    async def open(self, concurrency: int, window_s: float) -> None:
        self._client = make_client(concurrency, self.params)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def generate(self, prompt: Prompt, attempt: Attempt, on_text: OnText) -> None:
        if self._client is None:
            raise RuntimeError(f"generate backend {self.params.backend_name!r}: call open() before generate()")
        body = request_body(self.params, prompt, self.wants_continuous_usage)
        await complete(self._client, self.params, self.url, body, attempt, on_text)
