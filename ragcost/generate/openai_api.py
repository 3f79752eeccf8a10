"""Backend ``openai``: OpenAI's hosted API (or any hosted OpenAI-compatible one), with a key from the environment."""

from __future__ import annotations

from ragcost.generate.client import OpenAICompatible
from ragcost.generate.params import BackendParams
from ragcost.generate.registry import generator_registry


@generator_registry.register("openai")
class OpenAIApi(OpenAICompatible):
    default_base_url = "https://api.openai.com/v1"

    @classmethod
    def check(cls, params: BackendParams) -> None:
        super().check(params)
        if not params.api_key_env:
            raise ValueError(f"backend {params.backend!r} needs api_key_env: the name of the variable holding the key, e.g. OPENAI_API_KEY")
