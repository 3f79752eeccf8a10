"""Generation backends for the ``generate`` stage, registered by name; the prompt; the measured Attempt.

Built-ins: ``extractive`` (no LLM), ``vllm`` (a vLLM server), ``openai`` (hosted API),
``vllm-offline`` (in-process ``vllm.LLM``). Add one with a :class:`Generator` subclass and
``@generator_registry.register("name")``; a package can do it through the ``ragcost.backends``
entry point.
"""

from ragcost.generate import extractive as _extractive  # noqa: F401  (registers the backend)
from ragcost.generate import openai_api as _openai_api  # noqa: F401
from ragcost.generate import vllm_offline as _vllm_offline  # noqa: F401
from ragcost.generate import vllm_server as _vllm_server  # noqa: F401
from ragcost.generate.attempt import Attempt
from ragcost.generate.base import Generator, OnText
from ragcost.generate.params import BackendParams, RetryParams
from ragcost.generate.prompt import Prompt
from ragcost.generate.registry import generator_registry

__all__ = ["Attempt", "BackendParams", "Generator", "OnText", "Prompt", "RetryParams", "generator_registry"]
