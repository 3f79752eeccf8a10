"""Generation backends for the ``generate`` stage: prompt, OpenAI-compatible streaming client, extractive, vllm-offline."""
