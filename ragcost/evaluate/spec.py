"""The eval spec (eval/*.yaml): which dataset, which pipeline, which grid of index/embedding configs.

Paths are relative to the spec file. ``expand`` turns the grid into concrete configurations
(index x dim x precision x search-parameter sweep) and the combinations that cannot exist
(hnswlib at int8, IVF-PQ whose m does not divide the dim, ...) into skipped ones with the reason.
"""

from __future__ import annotations

import glob
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import ConfigDict, Field, ValidationError, field_validator

from ragcost.config.base import Strict
from ragcost.config.pipeline import ChunkingConfig, EmbedConfig

from ragcost.config.index import IndexConfig
from ragcost.config.base import format_validation_error, position
from ragcost.config.loader import read_yaml, validate
from ragcost.index import load_index_file, search_params
from ragcost.errors import ConfigError

Precision = Literal["float32", "float16", "int8", "binary"]
METRICS = ("ndcg", "recall", "mrr", "precision")
_METRIC = re.compile(r"^(ndcg|recall|mrr|precision)(?:@(\d+))?$")


class GridEntry(Strict):
    """One index config (or a glob of them) and what to vary on it."""

    index: str = Field(description="index YAML file or glob, relative to the spec file (e.g. ../indexes/hnsw-*.yaml)")
    name: Optional[str] = Field(None, description="label in reports; default: the index file's stem")
    dims: Optional[list[int]] = Field(None, description="embedding dims for this entry; default: the spec's dims")
    precisions: Optional[list[Precision]] = Field(None, description="index precisions for this entry; default: the spec's")
    sweep: dict[str, list[Union[int, float]]] = Field(
        default_factory=dict, description="search parameters to sweep on one built index, e.g. {ef: [32, 64, 128]}")
    rerank: Optional[dict[str, Any]] = Field(
        None, description="params of the registered 'rerank' stage, run over the retrieved candidates")
    candidates: Optional[int] = Field(None, ge=1, description="documents retrieved and handed to rerank; default 4 x the largest k")

    @field_validator("dims")
    @classmethod
    def _dims(cls, v: Optional[list[int]]) -> Optional[list[int]]:
        return check_dims(v)


def check_dims(v: Optional[list[int]]) -> Optional[list[int]]:
    """Dims to truncate to: each >= 8 (``dims: [-1]`` would slice to all but one dimension, 0 to none)."""
    if v is None:
        return v
    if not v:
        raise ValueError("give at least one dim, e.g. dims: [384, 256]")
    bad = [d for d in v if d < 8]
    if bad:
        raise ValueError(f"dim {bad[0]} is too small: each dim must be >= 8 (and at most the model's), e.g. dims: [384, 256]")
    return v


class EvalSpec(Strict):
    """What `ragcost eval` compares."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)  # ls.spec.max_queries = -1 is refused too

    name: Optional[str] = Field(None, description="label of this evaluation; default: the spec file's stem")
    pipeline: str = Field(description="pipeline YAML: embedding model, chunking, price book and resources")
    dataset: str = Field(description="BEIR folder (corpus.jsonl[.gz], queries.jsonl, qrels.tsv), relative to the spec file")
    grid: list[GridEntry] = Field(min_length=1, description="index configs to compare")
    embedders: Optional[list[EmbedConfig]] = Field(
        None, min_length=1, description="embed: entries (type, model, options) to compare; default: the pipeline's")
    chunking: Optional[list[ChunkingConfig]] = Field(
        None, min_length=1, description="chunking: entries (size, overlap, tail, min_tail) to compare; default: the pipeline's")
    dims: Optional[list[int]] = Field(None, description="embedding dims (truncate + re-normalise); default: the pipeline's")
    precisions: list[Precision] = Field(default_factory=lambda: ["float32"], description="index precisions")
    k: list[int] = Field(default_factory=lambda: [10], min_length=1, description="cut-offs; the first is the context size that counts useful documents")
    metrics: list[str] = Field(default_factory=lambda: ["ndcg@10", "recall", "mrr@10", "precision"],
                               description="ndcg|recall|mrr|precision, with @N or expanded for every k")
    relevance: Literal["graded", "binary"] = Field(
        "graded", description="graded: nDCG gains are the qrels scores; binary: every judged-relevant (score >= 1) document counts 1")
    quality: str = Field("ndcg@10", description="the quality metric of the Pareto front and the recommendation")
    within_pct: float = Field(2.0, ge=0, le=100, description="recommend the cheapest config within this % of the best quality")
    fetch_multiplier: int = Field(4, ge=1, le=64, description="chunks fetched per wanted document before collapsing to documents")
    max_queries: Optional[int] = Field(None, ge=1, description="evaluate only the first N judged queries (quick runs)")
    served_rounds: int = Field(
        3, ge=1, le=9, description="timed passes of each configuration's served path; its dollars are the median pass's "
                                   "and the passes' spread is its noise (1: a third of the time, noise not measured)")
    material_usd_per_month: float = Field(
        10.0, ge=0, description="the verdict's threshold: a saving under this many dollars a month is not worth a change")
    queries_per_month: Optional[int] = Field(
        None, ge=1, description="the traffic the verdict's $ a month is at; default: the price book's queries_per_month")

    @field_validator("dims")
    @classmethod
    def _dims(cls, v: Optional[list[int]]) -> Optional[list[int]]:
        return check_dims(v)

    @field_validator("served_rounds")
    @classmethod
    def _served_rounds(cls, v: int) -> int:
        if v % 2 == 0:
            raise ValueError(f"served_rounds {v}: give an odd number (1, 3, 5, 7 or 9), so the median is one pass")
        return v

    @field_validator("k")
    @classmethod
    def _k(cls, v: list[int]) -> list[int]:
        if any(x < 1 for x in v):
            raise ValueError("every k must be >= 1")
        return v

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, v: list[str]) -> list[str]:
        for m in v:
            if not _METRIC.match(m.strip().lower()):
                raise ValueError(f"unknown metric {m!r}; use {', '.join(METRICS)}, optionally with @N (e.g. ndcg@10)")
        return v

    @field_validator("quality")
    @classmethod
    def _quality(cls, v: str) -> str:
        if not _METRIC.match(v.lower()) or "@" not in v:
            raise ValueError(f"quality {v!r}: name one metric with its cut-off, e.g. ndcg@10")
        return v.lower()

    def metric_names(self) -> list[str]:
        """Metric names with cut-offs, in order, without repeats (the quality metric always included)."""
        out: list[str] = []
        for m in [*self.metrics, self.quality]:
            m = m.strip().lower()
            names = [m] if "@" in m else [f"{m}@{k}" for k in self.k]
            out.extend(n for n in names if n not in out)
        return out


@dataclass
class Candidate:
    """One configuration to measure: an index built at (dim, precision), searched with ``search``."""

    name: str
    entry: int
    index_file: str
    index_config: IndexConfig
    dim: int
    precision: str
    search: dict[str, Any]
    rerank: Optional[dict[str, Any]] = None
    candidates: Optional[int] = None

    @property
    def build_key(self) -> tuple:
        c = self.index_config
        return (self.index_file, c.backend, c.kind, repr(sorted(c.build.items())), c.shards or 1, self.dim, self.precision)


@dataclass
class Skipped:
    name: str
    reason: str


@dataclass
class LoadedSpec:
    spec: EvalSpec
    path: Path
    raw: Any
    name: str
    pipeline_path: Path
    dataset_path: Path
    entries: list[list[tuple[str, IndexConfig]]] = field(default_factory=list)  # per grid entry: (file, config)
    stages: dict[int, tuple[type, Any]] = field(default_factory=dict)  # grid entry -> (rerank stage class, params)

    def where(self, *loc: Any) -> str:
        pos = position(self.raw, list(loc))
        return f"{self.path}:{pos[0]}:{pos[1]}" if pos else str(self.path)


def load_spec(path: str | Path) -> LoadedSpec:
    """Read and validate an eval spec; resolve its files and globs; check sweeps against each index kind."""
    p = Path(path)
    raw = read_yaml(p)
    if raw is None:
        raise ConfigError(f"{p}: the file is empty; see eval/cranfield-indexes.yaml for an example")
    spec = validate(EvalSpec, raw, str(p))
    base = p.parent
    ls = LoadedSpec(spec, p, raw, spec.name or p.stem, base / spec.pipeline, base / spec.dataset)
    if not ls.pipeline_path.is_file():
        raise ConfigError(f"{ls.where('pipeline')}: pipeline: file not found: {ls.pipeline_path}")
    if not ls.dataset_path.is_dir():
        raise ConfigError(f"{ls.where('dataset')}: dataset: folder not found: {ls.dataset_path} (paths are relative to the spec file)")
    for i, entry in enumerate(spec.grid):
        pattern = str(base / entry.index)
        files = sorted(glob.glob(pattern)) if glob.has_magic(entry.index) else ([pattern] if Path(pattern).is_file() else [])
        if not files:
            raise ConfigError(f"{ls.where('grid', i, 'index')}: grid.{i}.index: no index file matches {entry.index!r} (relative to {base})")
        configs = [(f, load_index_file(f)) for f in files]
        for f, cfg in configs:
            _check_sweep(ls, i, entry, f, cfg)
        ls.entries.append(configs)
        if entry.rerank is not None:
            ls.stages[i] = _rerank_stage(ls, i, entry.rerank)
    if spec.quality not in spec.metric_names():  # pragma: no cover - metric_names always adds it
        raise ConfigError(f"{ls.where('quality')}: quality {spec.quality!r} is not among the metrics")
    return ls


def _rerank_stage(ls: LoadedSpec, i: int, params: dict[str, Any]) -> tuple[type, Any]:
    """The registered 'rerank' stage class and its validated params (file:line on a bad key)."""
    import ragcost.stages  # noqa: F401  (registers the built-in stages)
    from ragcost.stages.base import stage_registry

    try:
        import ragcost.stages.rerank  # noqa: F401  (the rerank backends, when this install has them)
    except ImportError:
        pass
    from ragcost.errors import UnknownNameError

    try:
        cls = stage_registry.get("rerank")
    except UnknownNameError:
        raise ConfigError(
            f"{ls.where('grid', i, 'rerank')}: grid.{i}.rerank: no stage type 'rerank' is registered "
            f"(known: {', '.join(stage_registry.names()) or 'none'}); this install has no ragcost.stages.rerank; "
            "remove rerank: from the grid or update ragcost") from None
    fields = cls.Params.model_fields
    if "type" in params and "type" not in fields and "backend" in fields:
        # `rerank: {type: rescore}` names the backend, as the stage's own `backend:` does
        params = {k: v for k, v in params.items() if k != "type"}
        params.setdefault("backend", ls.spec.grid[i].rerank["type"])
    try:
        return cls, cls.Params.model_validate(params)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, str(ls.path), ls.raw, ("grid", i, "rerank"))) from None


def _check_sweep(ls: LoadedSpec, i: int, entry: GridEntry, file: str, cfg: IndexConfig) -> None:
    for key, values in entry.sweep.items():
        if not values:
            raise ConfigError(f"{ls.where('grid', i, 'sweep', key)}: grid.{i}.sweep.{key}: give at least one value")
        for v in values:
            try:
                search_params(cfg, **{key: v})
            except ConfigError as e:
                known = ", ".join(search_params(cfg).model_fields) or "none"
                what = f"not a search parameter of kind {cfg.kind!r} ({Path(file).name}); known: {known}" \
                    if key not in cfg.search and key not in search_params(cfg).model_fields else f"{e} (got {v!r})"
                raise ConfigError(f"{ls.where('grid', i, 'sweep', key)}: grid.{i}.sweep.{key}: {what}") from None


def _short(precision: str) -> str:
    return {"float32": "f32", "float16": "f16", "int8": "int8", "binary": "bin"}[precision]


def expand(ls: LoadedSpec, native_dim: int, default_dim: int) -> tuple[list[Candidate], list[Skipped]]:
    """Every configuration of the grid, and the impossible ones with the reason they were skipped."""
    from ragcost.index.base import index_registry

    spec = ls.spec
    out: list[Candidate] = []
    skipped: list[Skipped] = []
    seen: dict[str, int] = {}
    for i, (entry, configs) in enumerate(zip(spec.grid, ls.entries)):
        dims = entry.dims or spec.dims or [default_dim]
        precisions = entry.precisions or spec.precisions
        keys = list(entry.sweep)
        for file, cfg in configs:
            label = entry.name if entry.name and len(configs) == 1 else (
                f"{entry.name}:{Path(file).stem}" if entry.name else Path(file).stem)
            if entry.rerank is not None and not entry.name:
                label += f"+{entry.rerank.get('type') or entry.rerank.get('backend') or 'rerank'}"
            for dim, prec in itertools.product(dims, precisions):
                base_name = f"{label} d{dim} {_short(prec)}"
                reason = None
                if dim > native_dim:
                    reason = f"dim {dim} is larger than the model's {native_dim}"
                else:
                    try:  # the backend's own constructor knows which combinations exist
                        index_registry.get(cfg.backend)(cfg, dim=dim, precision=prec)
                    except ConfigError as e:
                        reason = re.sub(r"^index:?\s*", "", str(e))
                if reason:
                    skipped.append(Skipped(base_name, reason))
                    continue
                for values in itertools.product(*(entry.sweep[k] for k in keys)) if keys else [()]:
                    search = {**cfg.search, **dict(zip(keys, values))}
                    name = base_name + "".join(f" {k}={v}" for k, v in zip(keys, values))
                    n = seen.get(name, 0) + 1
                    seen[name] = n
                    out.append(Candidate(name if n == 1 else f"{name} #{n}", i, file, cfg, dim, prec, search,
                                         entry.rerank, entry.candidates))
    return out, skipped
