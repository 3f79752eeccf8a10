"""Embedders that run a model derived from a local sentence-transformers folder (ONNX, static).

They share the source model's tokenizer and window with the torch backend, so the chunker cuts
the same chunks whichever runtime embeds them, and an eval compares runtimes on equal text.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path
from typing import Any

from ragcost.embed.base import Embedder
from ragcost.embed.hf import sentence_transformers_class
from ragcost.embed.sentence_transformers import resolve_model_path, source_fingerprint
from ragcost.errors import ConfigError


class DerivedEmbedder(Embedder):
    """Base: the source folder, its tokenizer and window, and a fingerprint of (runtime, options, source)."""

    runtime: str = ""  # what runs the vectors; part of the fingerprint

    def __init__(self, config, base: Path | None = None) -> None:
        super().__init__(config, base)
        if config.device == "cuda":
            raise ConfigError(f"embed.device 'cuda': embed.type {config.type} runs on the CPU here; "
                              "use device: cpu (or auto), or type: sentence-transformers on a GPU")
        self.path = resolve_model_path(config.model, base)

    def options(self) -> dict[str, Any]:
        """What the runtime was built with (export, quantisation, distillation); part of the fingerprint."""
        return {}

    def fingerprint(self) -> str:
        made_by = {"runtime": self.runtime, "options": self.options(), "source": source_fingerprint(self.path)}
        return hashlib.sha256(json.dumps(made_by, sort_keys=True).encode()).hexdigest()

    def failed(self, what: str, e: BaseException) -> ConfigError:
        """One line naming the model folder and the reason; never a fallback to another runtime."""
        reason = " ".join(str(e).split())[:300] or type(e).__name__
        return ConfigError(f"embed.type {self.config.type}: {what} the model folder {self.path} failed: {reason}; "
                           "check that the folder holds a complete sentence-transformers model (weights and tokenizer)")

    def load_source(self, **model_kwargs: Any) -> Any:
        """The source model on torch, for an export or a distillation (once, at first use); ``model_kwargs``
        go to the transformer's ``from_pretrained`` (e.g. ``attn_implementation``)."""
        SentenceTransformer = sentence_transformers_class("SentenceTransformer", f"embed.type {self.config.type}")
        extra = {"model_kwargs": model_kwargs} if model_kwargs else {}
        return SentenceTransformer(str(self.path), device="cpu", local_files_only=True, **extra)

    @cached_property
    def _st_config(self) -> dict[str, Any]:
        f = self.path / "sentence_bert_config.json"
        return json.loads(f.read_text()) if f.is_file() else {}

    @property
    def max_tokens(self) -> int:
        n = self._st_config.get("max_seq_length")
        return int(n) if n else int(min(self.tokenizer.model_max_length, 512))

    @cached_property
    def tokenizer(self) -> Any:
        sentence_transformers_class("SentenceTransformer", f"embed.type {self.config.type}")  # offline, quiet
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
        except Exception as e:  # noqa: BLE001 - any reason is reported, naming the folder
            raise self.failed("loading the tokenizer of", e) from None
