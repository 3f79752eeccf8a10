"""Validated settings of one generation backend and of its retries (YAML maps one-to-one)."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from ragcost.config.base import Strict
from ragcost.generate.abstain import INSTRUCTION
from ragcost.generate.registry import generator_registry

DEFAULT_SYSTEM = (
    "Answer the question using only the numbered passages. Cite every passage you use as [1], [2], ... "
    + INSTRUCTION
)
# The level chosen on the dev split of the labelled demo questions (eval/useful/): the lowest at which 95% of
# the off-topic ones abstain (19 of 20 have evidence <= 0.333); the test split checks it; the demo sets it.
RECOMMENDED_ABSTAIN_OVERLAP = 0.34
# The field's default, for a corpus nobody labelled: the highest level at which >= 95% of the judged (answerable)
# queries of every corpus measured still answer (top 5 by cosine): SciFact 96.0% at 0.25 (81.7% at 0.34),
# Cranfield 99.1% (92.4%), the demo's on-topic dev questions 100%; off topic, 70% of the demo's dev questions
# abstain at 0.25 (95% at 0.34). docs/concepts/useful-documents.md
DEFAULT_ABSTAIN_OVERLAP = 0.25
DEFAULT_TEMPLATE = "Passages:\n{context}\n\nQuestion: {question}\nAnswer:"


class RetryParams(Strict):
    """Exponential backoff with jitter between attempts of one backend (tenacity)."""

    attempts: int = Field(3, ge=1, le=20, description="tries per backend, the first included")
    initial_s: float = Field(0.5, ge=0, description="first backoff; doubles each retry")
    max_s: float = Field(8.0, ge=0, description="largest backoff")
    jitter_s: float = Field(0.5, ge=0, description="uniform random seconds added to each backoff")


class BackendParams(Strict):
    """One generator in the chain: the stage's own (primary) or a ``fallback`` entry.

    The fields of every built-in backend, flat (YAML maps one-to-one); each backend's class
    checks the ones it needs (:meth:`ragcost.generate.base.Generator.check`).
    """

    backend: str = Field(
        "extractive", description="a registered generate backend: extractive (no LLM), vllm (OpenAI-compatible server), "
                                  "openai (hosted API), vllm-offline (in-process vllm.LLM), or a plugin's",
        json_schema_extra=lambda schema: schema.update(examples=generator_registry.names()))  # those installed when the schema is made
    label: Optional[str] = Field(None, description="name in reports, e.g. large/small; default: backend[:model]")
    resource: Optional[str] = Field(None, description="price-book resource of this backend; default: the stage's")
    base_url: Optional[str] = Field(None, description="server URL ending in /v1 (vllm, openai)")
    model: Optional[str] = Field(None, description="served model name (vllm, openai) or local path (vllm-offline)")
    api: Literal["chat", "completions"] = Field("chat", description="/v1/chat/completions or /v1/completions")
    api_key_env: Optional[str] = Field(None, description="environment variable that holds the API key (openai: required)")
    stream: bool = Field(True, description="stream tokens (TTFT and inter-token latency are measured only when streaming)")
    continuous_usage: Optional[bool] = Field(
        None, description="ask vLLM for usage in every chunk, so a cut stream still has server token counts; default: on for vllm")
    max_tokens: int = Field(256, ge=1, description="most output tokens")
    temperature: float = Field(0.0, ge=0, description="sampling temperature")
    context_tokens: int = Field(2048, ge=1, description="budget for the retrieved passages in the prompt, in tokens")
    max_chunks: int = Field(8, ge=1, description="most retrieved chunks put in the prompt")
    tokenizer: Optional[str] = Field(None, description="tokenizer.json (or its folder) to count context tokens exactly; default: 4 characters a token")
    system: str = Field(DEFAULT_SYSTEM, description="system prompt")
    template: str = Field(DEFAULT_TEMPLATE, description="user prompt with {context} and {question}")
    sentences: int = Field(3, ge=1, description="extractive: sentences in the answer")
    abstain_overlap: float = Field(DEFAULT_ABSTAIN_OVERLAP, ge=0, le=1, description="extractive: answer that the sources "
                                   "hold no answer when no source passage holds this share of the question's content "
                                   "words (0: never on this ground; 0.25 keeps >= 95% of answerable SciFact and Cranfield "
                                   "queries answered; the demo sets 0.34, chosen on its labelled questions)")
    abstain_score: Optional[float] = Field(None, allow_inf_nan=False, description="extractive: also abstain when the best "
                                           "source's score (the last scoring stage's, e.g. cosine) is below this")
    timeout_s: float = Field(120.0, gt=0, description="whole-attempt deadline")
    connect_timeout_s: float = Field(5.0, gt=0, description="TCP connect deadline")
    read_timeout_s: float = Field(30.0, gt=0, description="longest silence between two stream chunks")
    retry: RetryParams = Field(default_factory=RetryParams)
    extra_body: dict[str, Any] = Field(default_factory=dict, description="extra request fields, e.g. {ignore_eos: true} for vLLM")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="vllm-offline: keyword arguments of vllm.LLM")

    @field_validator("backend")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in generator_registry:
            raise ValueError(f"unknown generate backend {name!r}; installed: {generator_registry.known()}")
        return name

    @model_validator(mode="after")
    def _needs(self) -> "BackendParams":
        if "{context}" not in self.template or "{question}" not in self.template:
            raise ValueError("template must contain {context} and {question}")
        generator_registry.get(self.backend).check(self)  # what this backend needs (model, base_url, ...)
        return self

    @property
    def backend_name(self) -> str:
        return self.label or generator_registry.get(self.backend).default_label(self)
