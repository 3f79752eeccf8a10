"""Request bodies: pydantic models; a malformed or unknown field is a 400 naming the field in one line.

``ChatRequest`` accepts every field of OpenAI's Chat Completions request. What the pipeline can
honour it honours (:mod:`ragcost.serve.options`); what it cannot is refused with a 400 naming the
parameter; a field that cannot change the answer (``metadata``, ``store``, ``service_tier`` ...)
is accepted. A field OpenAI does not define is refused, so a typo is never silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ragcost.runtime.request import invisible_only


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _not_blank(v: str) -> str:
    if not v.strip():
        raise ValueError("blank: send the question's text")
    unseen = invisible_only(v)
    if unseen:
        raise ValueError(f"holds only {unseen}, nothing to ask: send the question's text")
    return v


class QueryRequest(_Body):
    text: str = Field(min_length=1, max_length=8192, description="the question")
    k: Optional[int] = Field(None, ge=1, le=1000, description="results (default: what the pipeline's stages keep)")
    filter: Optional[dict[str, Any]] = Field(None, description="metadata filter; ANDed with the key's own")

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        return _not_blank(v)


class ContentPart(BaseModel):
    """A part of a message's content; only ``text`` parts can be answered (others are refused by name)."""

    model_config = ConfigDict(extra="allow")  # image_url, input_audio, file: refused with their type named
    type: str
    text: Optional[str] = None


class Message(_Body):
    role: Literal["system", "user", "assistant", "tool", "developer", "function"]
    content: Optional[Union[str, list[ContentPart]]] = None  # an assistant message that called a tool has none
    name: Optional[str] = None
    tool_calls: Optional[list[dict[str, Any]]] = None
    tool_call_id: Optional[str] = None
    function_call: Optional[dict[str, Any]] = None
    refusal: Optional[str] = None
    audio: Optional[dict[str, Any]] = None


class StreamOptions(_Body):
    include_usage: bool = False
    include_obfuscation: Optional[bool] = None


class ChatRequest(_Body):
    model: str
    messages: list[Message] = Field(min_length=1)
    stream: Optional[bool] = False
    stream_options: Optional[StreamOptions] = None
    # Honoured where the pipeline's generators can (ragcost.serve.options), else a 400 naming the field.
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, ge=0, le=1)
    seed: Optional[int] = None
    stop: Optional[Union[str, list[str]]] = None
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    presence_penalty: Optional[float] = Field(None, ge=-2, le=2)
    frequency_penalty: Optional[float] = Field(None, ge=-2, le=2)
    logit_bias: Optional[dict[str, float]] = None
    n: Optional[int] = Field(None, ge=1, le=128)
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)
    response_format: Optional[dict[str, Any]] = None
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[str, dict[str, Any]]] = None
    functions: Optional[list[dict[str, Any]]] = None
    function_call: Optional[Union[str, dict[str, Any]]] = None
    modalities: Optional[list[str]] = None
    audio: Optional[dict[str, Any]] = None
    web_search_options: Optional[dict[str, Any]] = None
    reasoning_effort: Optional[str] = None
    verbosity: Optional[str] = None
    # Cannot change the answer: accepted (user labels the query in the ledger).
    user: Optional[str] = Field(None, max_length=200)
    metadata: Optional[dict[str, Any]] = None
    store: Optional[bool] = None
    service_tier: Optional[str] = None
    parallel_tool_calls: Optional[bool] = None
    prediction: Optional[dict[str, Any]] = None
    prompt_cache_key: Optional[str] = None
    safety_identifier: Optional[str] = None
    # ragcost's own (pass with the client's extra_body):
    k: Optional[int] = Field(None, ge=1, le=1000)
    filter: Optional[dict[str, Any]] = None

    @field_validator("stream_options")
    @classmethod
    def _stream_options_need_stream(cls, v, info):
        if v is not None and not info.data.get("stream"):
            raise ValueError("only allowed with stream: true; set stream or leave stream_options out")
        return v

    @field_validator("stop")
    @classmethod
    def _stop(cls, v):
        stops = [v] if isinstance(v, str) else v
        if stops is not None and (len(stops) > 4 or not all(stops)):
            raise ValueError("up to 4 non-empty stop sequences")
        return v

    def question(self) -> tuple[str, Optional[str]]:
        """(text, error): the last user message is the query; the error names what to fix."""
        last = max((i for i, m in enumerate(self.messages) if m.role == "user"), default=None)
        if last is None:
            return "", "messages: no user message; the last user message is the query"
        m = self.messages[last]
        parts = [ContentPart(type="text", text=m.content)] if isinstance(m.content, str) else (m.content or [])
        for j, p in enumerate(parts):
            if p.type != "text" or p.text is None:
                return "", f"messages.{last}.content.{j}: only text parts can be answered (got {p.type!r})"
        text = "".join(p.text or "" for p in parts)
        if not text.strip():
            return "", f"messages.{last}.content: blank; the last user message is the query"
        unseen = invisible_only(text)
        if unseen:
            return "", f"messages.{last}.content: holds only {unseen}, nothing to ask; the last user message is the query"
        return text, None


def one_line(e: ValidationError) -> tuple[str, str]:
    """(field, message) of the first problem, e.g. ("messages.0.content", "messages.0.content: required field is
    missing; add it"): the configuration files' formatter (:func:`ragcost.config.base.one_line`), worded for a body."""
    from ragcost.config.base import first_loc
    from ragcost.config.base import one_line as first_problem

    field = ".".join(str(x) for x in first_loc(e)) or "body"
    return field, first_problem(e, unknown="unknown field; remove it", top="body")
