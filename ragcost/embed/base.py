"""The Embedder protocol: one method (``embed_batch``) does the work; the base class does the rest."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Optional

import numpy as np

from ragcost.config.pipeline import EmbedConfig
from ragcost.registry import Registry

# Files that decide what a model computes: weights, tokenizer, config, pooling.
_FINGERPRINT_SUFFIXES = (".safetensors", ".bin", ".json", ".txt", ".model", ".pt")


def fingerprint_dir(path: str | Path) -> str:
    """sha256 over the model's weight, tokenizer and config files (names and bytes), not its name."""
    root = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in _FINGERPRINT_SUFFIXES and p.name != "README.md")
    for p in files:
        h.update(p.relative_to(root).as_posix().encode())
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


class Embedder(ABC):
    """Turns texts into L2-normalised float32 vectors at the model's native dimension."""

    name: ClassVar[str]
    # A batch embed's CPU split over its queries (issue 24): query i's share is (tokens_i + c) / sum(tokens + c),
    # c the per-call fixed cost in token-equivalents, measured for the backend (``python -m bench.embed_split``:
    # a query's share of the batch against its CPU embedded alone). None: not measured, every query pays the average.
    split_fixed_tokens: ClassVar[Optional[float]] = None

    def __init__(self, config: EmbedConfig, base: Optional[Path] = None) -> None:
        """Cheap: nothing loads here. ``base`` is the folder a relative model path is read from."""
        self.config = config
        self.base = base

    def warm_up(self) -> None:
        """Load weights; called once before the first batch."""

    def warm_up_queries(self) -> None:
        """Load what embedding queries needs (the embed stage's warm-up); a backend with a lighter query path
        (:mod:`ragcost.embed.lean_bert`) loads only that, and ``embed_queries`` then runs it."""
        self.warm_up()

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Queries' vectors (the embed stage's call): ``embed`` unless the backend has a lighter query path."""
        return self.embed(texts)

    @abstractmethod
    def embed_batch(self, texts: list[str]) -> np.ndarray:
        """(len(texts), native_dim) float32, L2-normalised."""

    def embed(self, texts: list[str]) -> np.ndarray:
        """All texts, in batches of ``config.batch_size``; backends may override with a faster path."""
        if not texts:
            return np.zeros((0, self.native_dim), dtype=np.float32)
        bs = self.config.batch_size
        return np.vstack([self.embed_batch(texts[i : i + bs]) for i in range(0, len(texts), bs)])

    @property
    @abstractmethod
    def native_dim(self) -> int: ...

    @property
    @abstractmethod
    def max_tokens(self) -> int:
        """Tokens the model reads; longer inputs are truncated."""

    @property
    @abstractmethod
    def tokenizer(self) -> Any:
        """A Hugging Face fast tokenizer, used by the chunker to count tokens."""

    @abstractmethod
    def fingerprint(self) -> str:
        """Hash of what makes the vectors (weights + tokenizer), not the model's name."""

    def count_tokens(self, texts: list[str]) -> list[int]:
        enc = self.tokenizer(texts, add_special_tokens=True, truncation=False)
        return [len(ids) for ids in enc["input_ids"]]


embedder_registry: Registry[type[Embedder]] = Registry("embedder")
