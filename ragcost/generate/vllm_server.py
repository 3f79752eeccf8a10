"""Backend ``vllm``: a running vLLM server (``vllm serve``), OpenAI-compatible, asked for usage in every chunk.

Continuous usage means a stream cut mid-answer still carries the server's own token counts.
"""

from __future__ import annotations

from ragcost.generate.client import OpenAICompatible
from ragcost.generate.registry import generator_registry


@generator_registry.register("vllm")
class VllmServer(OpenAICompatible):
    continuous_usage = True
