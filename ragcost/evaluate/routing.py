"""``ragcost eval`` on a routing spec: the knn router's cost-quality curve over thresholds, and a chosen threshold.

```yaml
routing:
  pipeline: ../pipelines/quickstart.yaml   # its embedder embeds the queries, as the router would
  labelled: routing/quickstart.jsonl        # {"text", "label": small|large[, "quality": {small: q, large: q}]}
  router: {k: 10, min_similarity: 0.3}      # knn options; threshold is what the curve sweeps
  folds: 5                                  # a query is scored only against the other folds
  targets:                                  # $ per query of each target
    small: {resource: openai-gpt-4o-mini, input_tokens: 900, output_tokens: 150}
    large: {input_per_1m: 2.50, output_per_1m: 10.00, input_tokens: 900, output_tokens: 150}
  quality_floor: 0.95                       # recall of needs-large to keep
  target_share: 0.5                         # most traffic to large
```

Per threshold: the share of queries sent to large, the recall of "needs large" queries (the
quality kept), $ per 1k queries, and PGR (performance gap recovered). The chosen threshold is
the cheapest meeting ``quality_floor``; when none does, the best recall within ``target_share``.
APGR is RouteLLM's average PGR over the share sent to large, from the per-query quality in the
file, else from the labels (the small target fails a needs-large query, everything else passes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
from pydantic import Field, model_validator

from ragcost.config.base import Strict
from ragcost.config.loader import read_yaml, validate
from ragcost.errors import ConfigError


class TargetPrice(Strict):
    resource: Optional[str] = Field(None, description="a token-priced price-book resource")
    input_per_1m: Optional[float] = Field(None, ge=0, description="$ per 1M input tokens (instead of resource)")
    output_per_1m: Optional[float] = Field(None, ge=0)
    input_tokens: int = Field(ge=0, description="prompt tokens of a typical query (question + context)")
    output_tokens: int = Field(ge=0, description="answer tokens of a typical query")

    @model_validator(mode="after")
    def _one_price(self) -> "TargetPrice":
        if (self.resource is None) == (self.input_per_1m is None or self.output_per_1m is None):
            raise ValueError("give either resource: (a token-priced price-book entry) or input_per_1m and output_per_1m")
        return self


class RoutingSpec(Strict):
    pipeline: str = Field(description="pipeline YAML whose embedder embeds the queries, relative to the spec")
    labelled: str = Field(description="labelled query file (JSON lines: text, label), relative to the spec")
    pricing: Optional[str] = Field(None, description="price book for resource: prices; default: the pipeline's")
    router: dict[str, Any] = Field(default_factory=dict, description="knn options (k, min_similarity); threshold is swept")
    small: str = "small"
    large: str = "large"
    default: str = Field("large", description="target of queries no example is near (the router's default)")
    folds: int = Field(5, ge=2, le=100, description="cross-validation folds: a query never votes for itself")
    seed: int = 0
    thresholds: list[float] = Field(default_factory=lambda: [round(x, 2) for x in np.arange(0.0, 1.0001, 0.01)],
                                    description="thresholds on the curve; default 0 to 1 by 0.01 (the table prints every 0.05)")
    targets: dict[str, TargetPrice]
    quality_floor: float = Field(0.95, gt=0, le=1, description="recall of needs-large queries to keep")
    target_share: float = Field(0.5, gt=0, le=1, description="most of the traffic that may go to large")


    @model_validator(mode="after")
    def _default_is_a_target(self) -> "RoutingSpec":
        if self.default not in (self.small, self.large):
            raise ValueError(f"default {self.default!r} must be the small ({self.small!r}) or the large ({self.large!r}) target")
        return self


class RoutingFile(Strict):
    routing: RoutingSpec


@dataclass
class CurvePoint:
    threshold: float
    share_large: float
    recall_large: float  # needs-large queries sent to large
    precision_large: float
    usd_per_1k: float
    quality: float  # mean per-query quality of the routed answers
    pgr: float
    undecided: int


@dataclass
class RoutingResult:
    name: str
    queries: int
    needs_large: int
    usd_per_1k_small: float
    usd_per_1k_large: float
    curve: list[CurvePoint]
    chosen: Optional[CurvePoint]
    rule: str
    best_within_share: Optional[CurvePoint]  # the best recall with share to large <= target_share
    apgr: float
    quality_from: str
    quality_floor: float
    target_share: float
    bar_met: bool
    embed_seconds: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_routing_spec(path: Path) -> bool:
    raw = read_yaml(path)
    return isinstance(raw, dict) and "routing" in raw


def _price(t: TargetPrice, book) -> float:
    """$ per query of one target."""
    if t.resource is None:
        return (t.input_tokens * t.input_per_1m + t.output_tokens * t.output_per_1m) / 1e6
    from ragcost.cost.compute import cost_of
    from ragcost.records import UsageRecord

    return cost_of(UsageRecord(stage="generate", resource=t.resource, input_tokens=t.input_tokens,
                               cached_input_tokens=0, output_tokens=t.output_tokens), book)


def fold_scores(vecs: np.ndarray, is_large: np.ndarray, folds: int, seed: int, k: int, min_similarity: float) -> np.ndarray:
    """knn score of every query against the examples outside its fold (NaN: no example near enough)."""
    from ragcost.stages.route.knn import knn_scores

    fold = np.random.default_rng(seed).permutation(len(vecs)) % folds
    out = np.full(len(vecs), np.nan)
    for f in range(folds):
        test, train = fold == f, fold != f
        out[test], _ = knn_scores(vecs[test], vecs[train], is_large[train], k, min_similarity)
    return out


def curve(scores: np.ndarray, needs_large: np.ndarray, q_small: np.ndarray, q_large: np.ndarray, usd_small: float,
          usd_large: float, thresholds: list[float], default_large: bool) -> list[CurvePoint]:
    """One point per threshold: where the router sends each query, and what that costs and keeps."""
    base, top = q_small.mean(), q_large.mean()
    out = []
    for t in thresholds:
        undecided = np.isnan(scores)
        to_large = np.where(undecided, default_large, np.nan_to_num(scores, nan=0.0) >= t)
        quality = float(np.where(to_large, q_large, q_small).mean())
        share = float(to_large.mean())
        out.append(CurvePoint(
            threshold=float(t), share_large=share,
            recall_large=float(to_large[needs_large].mean()) if needs_large.any() else 1.0,
            precision_large=float(needs_large[to_large].mean()) if to_large.any() else 1.0,
            usd_per_1k=1000 * (share * usd_large + (1 - share) * usd_small), quality=quality,
            pgr=float((quality - base) / (top - base)) if top > base else 1.0, undecided=int(undecided.sum())))
    return out


def apgr(points: list[CurvePoint]) -> float:
    """RouteLLM's APGR: the area under PGR against the share sent to large, from (0, 0) to (1, 1)."""
    best: dict[float, float] = {0.0: 0.0, 1.0: 1.0}
    for p in points:
        best[p.share_large] = max(best.get(p.share_large, -np.inf), p.pgr)
    xs = sorted(best)
    return float(np.trapezoid([best[x] for x in xs], xs))


def choose(points: list[CurvePoint], floor: float, share: float) -> tuple[Optional[CurvePoint], str]:
    """The cheapest point keeping ``floor`` recall; else the best recall within ``share``."""
    ok = [p for p in points if p.recall_large >= floor]
    if ok:
        p = min(ok, key=lambda p: (p.share_large, -p.recall_large))
        return p, f"cheapest threshold with recall of needs-large >= {floor:g}"
    within = [p for p in points if p.share_large <= share]
    if within:
        p = max(within, key=lambda p: (p.recall_large, -p.share_large))
        return p, f"no threshold reaches recall {floor:g}; best recall with share to large <= {share:g}"
    return None, "no threshold meets the quality floor or the target share"


def run_routing(path: Path) -> RoutingResult:
    """Embed the labelled set with the pipeline's embedder, score by k-fold knn, sweep the threshold."""
    from time import perf_counter

    from ragcost.cost.pricebook import load_price_book
    from ragcost.embed.reduce import truncate
    from ragcost.runtime.load import resolve
    from ragcost.runtime.pipeline import Pipeline
    from ragcost.stages.route.examples import read_examples
    from ragcost.stages.route.knn import KnnParams

    raw = read_yaml(path)
    spec = validate(RoutingFile, raw, str(path)).routing
    base = path.parent
    knn = validate(KnnParams, {"examples": spec.labelled, **spec.router}, str(path), prefix=("routing", "router"), tree=raw)
    for t in (spec.small, spec.large):
        if t not in spec.targets:
            raise ConfigError(f"{path}: routing.targets: no price for target {t!r}; add targets.{t}: {{input_tokens: ..., ...}}")
    lab = resolve(base, spec.labelled)
    if lab is None:
        raise ConfigError(f"{path}: routing.labelled: file {spec.labelled!r} not found (relative to {base})")
    examples = read_examples(lab, [spec.small, spec.large])
    pipe = Pipeline.load(base / spec.pipeline, judge=False)
    book_path = resolve(base, spec.pricing) if spec.pricing else pipe.price_book_path
    book = load_price_book(book_path)
    t0 = perf_counter()
    vecs = truncate(pipe.embedder.embed([e.text for e in examples]), pipe.dim)
    embed_seconds = perf_counter() - t0
    needs = np.array([e.label == spec.large for e in examples])
    scores = fold_scores(vecs, needs.astype(np.float32), spec.folds, spec.seed, knn.k, knn.min_similarity)
    qs, source = _quality(examples, needs, spec)
    usd_s, usd_l = _price(spec.targets[spec.small], book), _price(spec.targets[spec.large], book)
    pts = curve(scores, needs, qs[0], qs[1], usd_s, usd_l, spec.thresholds, spec.default == spec.large)
    chosen, rule = choose(pts, spec.quality_floor, spec.target_share)
    met = chosen is not None and chosen.recall_large >= spec.quality_floor and chosen.share_large <= spec.target_share
    return RoutingResult(name=path.stem, queries=len(examples), needs_large=int(needs.sum()),
                         usd_per_1k_small=1000 * usd_s, usd_per_1k_large=1000 * usd_l, curve=pts, chosen=chosen, rule=rule,
                         best_within_share=max((p for p in pts if p.share_large <= spec.target_share),
                                               key=lambda p: (p.recall_large, -p.share_large), default=None),
                         apgr=apgr(pts), quality_from=source, quality_floor=spec.quality_floor, target_share=spec.target_share,
                         bar_met=met, embed_seconds=embed_seconds,
                         notes=[f"knn k={knn.k}, min_similarity={knn.min_similarity:g}, {spec.folds}-fold cross-validation "
                                f"(seed {spec.seed}): each query is scored against the other folds only"])


def _quality(examples, needs: np.ndarray, spec: RoutingSpec) -> tuple[tuple[np.ndarray, np.ndarray], str]:
    """Per-query quality of each target's answer: from the file's ``quality`` where every line has it, else the labels."""
    given = [e.extra.get("quality") for e in examples]
    if all(isinstance(g, dict) and spec.small in g and spec.large in g for g in given):
        return (np.array([g[spec.small] for g in given], float), np.array([g[spec.large] for g in given], float)), "per-query quality in the file"
    return (np.where(needs, 0.0, 1.0), np.ones(len(needs))), "labels (small fails a needs-large query; everything else passes)"
