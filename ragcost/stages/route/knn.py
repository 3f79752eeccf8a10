"""``knn``: the query embedding (already computed) against labelled examples, with a score threshold.

```yaml
- {type: route, router: knn, default: large, examples: ../eval/routing/quickstart.jsonl,
   k: 10, min_similarity: 0.3, threshold: 0.4}
```

Score = the similarity-weighted share of the ``k`` nearest examples labelled ``large`` among
those at cosine >= ``min_similarity``; the query goes to ``large`` when score >= ``threshold``,
else to ``small``. No example that close: undecided, so the stage's ``default`` takes it.
``ragcost eval --routing`` prints the curve over ``threshold`` and picks one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
from pydantic import Field

from ragcost.errors import ConfigError
from ragcost.records import QueryState
from ragcost.stages.route.base import Decision, Router, RouterParams, router_registry
from ragcost.stages.route.examples import Example, read_examples


class KnnParams(RouterParams):
    examples: str = Field(description="labelled file (JSON lines: text, label), relative to the pipeline file")
    k: int = Field(10, ge=1, description="nearest examples that vote")
    min_similarity: float = Field(0.3, ge=-1, le=1, description="examples below this cosine do not vote; none left: undecided")
    threshold: float = Field(0.5, ge=0, le=1, description="score (weighted share of `large` votes) at or above which the query goes large")
    small: str = Field("small", description="the cheap target")
    large: str = Field("large", description="the target for queries that need it")


def knn_scores(queries: np.ndarray, examples: np.ndarray, is_large: np.ndarray, k: int,
               min_similarity: float) -> tuple[np.ndarray, np.ndarray]:
    """(score, nearest cosine) per query; score is NaN where no example reaches ``min_similarity``.

    Vectors are L2-normalised, so the dot product is the cosine.
    """
    sims = np.asarray(queries, np.float32) @ np.asarray(examples, np.float32).T
    k = min(k, sims.shape[1])
    top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    top_sims = np.take_along_axis(sims, top, axis=1)
    votes = np.where(top_sims >= min_similarity, np.maximum(top_sims, 1e-6), 0.0)
    large = (votes * is_large[top]).sum(axis=1)
    total = votes.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(total > 0, large / np.where(total > 0, total, 1.0), np.nan)
    return score, top_sims.max(axis=1)


def embed_texts(ctx, texts: list[str]) -> np.ndarray:
    """Texts embedded as the pipeline embeds its queries (same model, truncated to the index dim)."""
    from ragcost.embed.reduce import truncate

    return truncate(ctx.embedder.embed(texts), ctx.dim)


@router_registry.register("knn")
class Knn(Router):
    name = "knn"
    Params = KnnParams

    def __init__(self, params: KnnParams, ctx) -> None:
        super().__init__(params, ctx)
        self.vectors: Optional[np.ndarray] = None
        self.is_large: Optional[np.ndarray] = None

    @classmethod
    def targets_named(cls, params: KnnParams) -> list[tuple[tuple, str]]:
        return [(("small",), params.small), (("large",), params.large)]

    @classmethod
    def examples_path(cls, params: KnnParams, base: Path, where=lambda loc: ".".join(map(str, loc))) -> Path:
        for cand in (base / params.examples, Path(params.examples)):
            if cand.is_file():
                return cand
        raise ConfigError(f"{where(('examples',))}: labelled file {params.examples!r} not found (looked beside the pipeline and in {Path.cwd()})")

    @classmethod
    def check_files(cls, params: KnnParams, base: Path, targets: list[str], where=lambda loc: ".".join(map(str, loc))) -> list[Example]:
        return read_examples(cls.examples_path(params, base, where), [params.small, params.large])

    def warm_up(self) -> None:
        if self.vectors is not None:
            return
        ex = self.check_files(self.params, self.ctx.base, [])
        self.vectors = embed_texts(self.ctx, [e.text for e in ex])
        self.is_large = np.array([e.label == self.params.large for e in ex], np.float32)

    def decide(self, batch: list[QueryState]) -> list[Decision]:
        self.warm_up()
        p = self.params
        have = [s for s in batch if s.vector is not None]
        scores: dict[int, tuple[float, float]] = {}
        if have:
            sc, near = knn_scores(np.stack([s.vector for s in have]), self.vectors, self.is_large, p.k, p.min_similarity)
            scores = {id(s): (float(a), float(b)) for s, a, b in zip(have, sc, near)}
        out = []
        for s in batch:
            if id(s) not in scores:
                out.append(Decision(None, None, "no query embedding"))
                continue
            score, nearest = scores[id(s)]
            if np.isnan(score):
                out.append(Decision(None, None, f"no example within min_similarity {p.min_similarity:g} (nearest {nearest:.3f})"))
            elif score >= p.threshold:
                out.append(Decision(p.large, score, f"knn score {score:.3f} >= threshold {p.threshold:g}"))
            else:
                out.append(Decision(p.small, score, f"knn score {score:.3f} < threshold {p.threshold:g}"))
        return out
