"""The Generator protocol: one method (``generate``) turns a prompt into a measured Attempt.

A backend is a class registered by name (``@generator_registry.register("name")``), built-ins
included; the generate stage builds one per entry of its chain and asks the class, never the
name, what it needs:

- ``check(params)``: at load, refuse params the backend cannot run with (a ``ValueError`` that
  names the field and the fix; the loader adds file:line:col);
- ``warm_up()``: once, before the first batch: load a model, check that an API key is set;
- ``open(concurrency, window_s)`` / ``aclose()``: around each batch: a pooled client, a batcher;
- ``generate(prompt, attempt, on_text)``: fill the attempt (text, tokens, timings, ok or error).

A backend fault is data: ``generate`` records it in the attempt (``ok=False``, ``error``,
``retryable``) and returns; the stage retries, falls back and prices every attempt. The stage
times an attempt whose backend left ``start``/``end`` unset.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, ClassVar

from ragcost.generate.attempt import Attempt
from ragcost.generate.params import BackendParams
from ragcost.generate.prompt import Prompt
from ragcost.generate.registry import generator_registry

OnText = Callable[[str], None]  # receives each piece of the answer as it arrives, in order


class Generator(ABC):
    """One backend of a generate chain, with its params (``backend`` names its registration)."""

    # Whether the stage may hold a request back to the next ``batch_window_ms`` boundary. A
    # backend that collects its own window (vllm-offline) says no.
    aligns_starts: ClassVar[bool] = True
    # Request options (OpenAI's names: temperature, seed, stop ...) this backend's server applies
    # when a request sends them (``Prompt.options``). The stage cuts every backend's text at
    # ``stop`` and ``max_tokens`` itself (ragcost.generate.clip), so those two hold for all.
    request_options: ClassVar[frozenset[str]] = frozenset()
    # Whether sampling options (temperature, top_p, seed) cannot change this backend's answer.
    deterministic: ClassVar[bool] = False

    def __init__(self, params: BackendParams) -> None:
        self.params = params

    @classmethod
    def check(cls, params: BackendParams) -> None:
        """Raise ``ValueError`` naming the missing or bad field and the fix; called when params load."""

    @classmethod
    def default_label(cls, params: BackendParams) -> str:
        """The backend's name in reports when ``label:`` is not given."""
        return f"{params.backend}:{params.model}" if params.model else params.backend

    @property
    def endpoint(self) -> str:
        """What serves this backend's requests; attempts on one endpoint share its busy periods.

        An in-process engine is this object; a server overrides it with its URL and model.
        """
        return f"{self.params.backend_name} in-process #{id(self):x}"

    def warm_up(self) -> None:
        """Heavy or environment-dependent setup, once, before the first batch (may be called again)."""

    async def open(self, concurrency: int, window_s: float) -> None:
        """Before a batch: ``concurrency`` requests may be in flight; ``window_s`` is the stage's batch window."""

    async def aclose(self) -> None:
        """After a batch, failed or not: release what ``open`` made."""

    @abstractmethod
    async def generate(self, prompt: Prompt, attempt: Attempt, on_text: OnText) -> None:
        """Fill ``attempt`` from one request; pass the answer's text to ``on_text`` as it arrives.

        Never raise for a backend fault: set ``ok``, ``error``, ``retryable`` and whatever usage is known.
        """


__all__ = ["Generator", "OnText", "generator_registry"]
