"""Static embedder: model2vec distilled from the local sentence-transformers model at first use.

A static model is one vector per token (the source model's output for that token alone, reduced
with PCA); a text's vector is the mean of its tokens'. No attention, no context: hundreds of times
faster than the transformer, and lower in quality (how much lower is what `ragcost eval` says).
The distilled model lands in ``<cache>/static/<fingerprint[:16]>/``; nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ragcost.embed.base import embedder_registry
from ragcost.embed.cache import built_folder
from ragcost.embed.derived import DerivedEmbedder
from ragcost.errors import DependencyError


def _model2vec() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import model2vec
    except ImportError:
        raise DependencyError("embed.type static needs model2vec: pip install 'ragcost[static]'") from None
    return model2vec


@embedder_registry.register("static")
class StaticEmbedder(DerivedEmbedder):
    name = "static"
    runtime = "model2vec"

    def __init__(self, config, base: Path | None = None) -> None:
        super().__init__(config, base)
        self.pca_dims = config.static.pca_dims if config.static else 256
        self._model: Any = None

    def options(self) -> dict[str, Any]:
        return {"distill": "model2vec.distill", "pca_dims": self.pca_dims, "quantize_to": "float16"}

    def warm_up(self) -> None:
        if self._model is not None:
            return
        m2v = _model2vec()
        folder = built_folder("static", self.fingerprint()[:16], self._distill)
        self._model = m2v.StaticModel.from_pretrained(str(folder))

    def _distill(self, out: Path) -> dict[str, Any]:
        _model2vec()
        try:
            from model2vec.distill import distill
        except ImportError as e:
            raise DependencyError(f"embed.type static needs model2vec's distill extra ({e}): pip install 'ragcost[static]'") from None
        try:
            model = distill(model_name=str(self.path), pca_dims=self.pca_dims, device="cpu")
            model.save_pretrained(str(out))
        except Exception as e:  # noqa: BLE001 - any reason is reported, naming the folder
            raise self.failed("distilling", e) from None
        return {"source": str(self.path), **self.options()}

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        self.warm_up()
        out = np.asarray(self._model.encode(texts, max_length=self.max_tokens, batch_size=max(len(texts), 1),
                                            show_progress_bar=False), dtype=np.float32)
        out = np.atleast_2d(out)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return np.ascontiguousarray(out / norms)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.native_dim), dtype=np.float32)
        return self.embed_batch(texts)

    @property
    def native_dim(self) -> int:
        self.warm_up()
        return int(self._model.dim)
