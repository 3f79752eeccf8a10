"""Request bodies: pydantic models; a malformed or unknown field is a 422 naming the field in one line."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QueryRequest(_Body):
    text: str = Field(min_length=1, max_length=8192, description="the question")
    k: Optional[int] = Field(None, ge=1, le=1000, description="results (default: the retrieve stage's k)")
    filter: Optional[dict[str, Any]] = Field(None, description="metadata filter; ANDed with the key's own")


class ContentPart(_Body):
    type: Literal["text"]
    text: str


class Message(_Body):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Union[str, list[ContentPart]]
    name: Optional[str] = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class StreamOptions(_Body):
    include_usage: bool = False


class ChatRequest(_Body):
    model: str
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    # Sampling fields OpenAI clients commonly send: accepted, and meaningless to retrieval.
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    max_tokens: Optional[int] = None
    max_completion_tokens: Optional[int] = None
    n: Optional[Literal[1]] = None
    user: Optional[str] = None
    seed: Optional[int] = None
    # ragcost's own (pass with the client's extra_body):
    k: Optional[int] = Field(None, ge=1, le=1000)
    filter: Optional[dict[str, Any]] = None

    def question(self) -> str:
        users = [m for m in self.messages if m.role == "user"]
        if not users or not users[-1].text().strip():
            raise ValueError("messages: no user message with text; the last user message is the query")
        return users[-1].text()


def one_line(e: ValidationError) -> tuple[str, str]:
    """(field, message) of the first error, e.g. ("messages.0.content", "messages.0.content: Field required")."""
    err = e.errors()[0]
    field = ".".join(str(x) for x in err["loc"]) or "body"
    msg = err["msg"] if err["type"] != "extra_forbidden" else "unknown field; remove it"
    return field, f"{field}: {msg}"
