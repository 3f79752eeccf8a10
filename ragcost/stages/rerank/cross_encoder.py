"""Cross-encoder re-ranking: a sentence-transformers ``CrossEncoder`` from a local folder, batched.

Every (query, chunk) pair of the stage's batch goes into one ``predict`` call, which runs
``batch_size`` pairs at a time (on the GPU when there is one), so a batch of queries costs
ceil(pairs / batch_size) forward passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field

from ragcost.embed.hf import local_dir, sentence_transformers_class, torch_device
from ragcost.errors import ConfigError
from ragcost.stages.rerank.base import Reranker, RerankerParams, batches, reranker_registry


class CrossEncoderParams(RerankerParams):
    model: str = Field(description="a local cross-encoder folder (relative to the pipeline file or the working directory); nothing is downloaded")
    not_scoring = frozenset({"top_n", "batch_size", "device"})
    batch_size: int = Field(32, ge=1, description="pairs per forward pass")
    device: Literal["cpu", "cuda", "auto"] = Field("auto", description="auto = cuda when available")
    max_length: Optional[int] = Field(None, ge=8, description="tokens per pair; default: the model's")


def resolve_local_model(model: str, base: Optional[Path]) -> Path:
    found = local_dir(model, base)
    if found is not None:
        return found
    raise ConfigError(
        f"rerank: model {model!r} is not a local folder (looked beside the pipeline and in {Path.cwd()}); "
        "nothing is downloaded at run time: save the cross-encoder to a folder and give its path"
    )


@reranker_registry.register("cross-encoder")
class CrossEncoderReranker(Reranker):
    name = "cross-encoder"
    score_scale = "logit"  # raw logits, or a probability for a one-label model with a sigmoid head
    Params = CrossEncoderParams

    def __init__(self, params: CrossEncoderParams, ctx) -> None:
        super().__init__(params, ctx)
        self._model: Any = None

    def warm_up(self) -> None:
        if self._model is not None:
            return
        path = resolve_local_model(self.params.model, self.ctx.base if self.ctx is not None else None)
        CrossEncoder = sentence_transformers_class("CrossEncoder", "rerank backend 'cross-encoder'")
        device = torch_device(self.params.device)
        self._model = CrossEncoder(str(path), device=device, local_files_only=True, max_length=self.params.max_length)

    def rerank(self, batch, usage) -> None:
        self.warm_up()
        pairs = [(s.text, h.text) for s in batch for h in s.hits]
        if pairs:
            scores = self._model.predict(pairs, batch_size=self.params.batch_size, show_progress_bar=False, convert_to_numpy=True)
            it = iter(scores.reshape(-1).tolist())
            for s in batch:
                for h in s.hits:
                    h.score = float(next(it))
        usage.notes["rerank"] = {"scored": len(pairs), "batches": batches(len(pairs), self.params.batch_size)}
        usage.notes["device"] = str(self._model.device)
