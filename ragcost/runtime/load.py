"""Loading a pipeline YAML: the validated config, its index config and each stage's class and params.

Everything is checked here, at load, with file:line:col: stage types against the stage registry,
each stage's own params, the index backend and kind against the index registry, and the
checks named by ``redact:`` against the guard registry. Nothing heavy is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from ragcost.config.index import IndexConfig
from ragcost.config.base import position
from ragcost.config.loader import read_yaml, validate
from ragcost.config.pipeline import PipelineConfig, stage_params
from ragcost.errors import ConfigError
from ragcost.stages.base import Stage, StageParams


def resolve(base: Path, rel: str) -> Optional[Path]:
    """A path relative to the pipeline file's folder, else to the working directory."""
    for cand in (base / rel, Path(rel)):
        if cand.exists():
            return cand
    return None


def no_store_message(file: Path, pipeline: Path) -> str:
    """The one line for a store file that is not there. A relative store (and index_dir) is read from the working
    directory, where every other path of a pipeline is read beside the pipeline first: the line says so, and names
    the store when one is beside the pipeline (the usual cause: run from another folder)."""
    if file.is_absolute():
        return f"no store at {file}; run `ragcost index {pipeline}` first"
    cwd = Path.cwd()
    line = (f"no store at {file} (a relative store: URL is read from the working directory, {cwd}, as index_dir: is; "
            f"only the files a pipeline reads are looked for beside it); run `ragcost index {pipeline}` first")
    folder = Path(pipeline).resolve().parent
    if (folder / file).is_file() and folder != cwd.resolve():
        line += f", or run from {folder}, where {folder / file} is"
    return line


@dataclass
class LoadedPipeline:
    """A pipeline file, validated: nothing opened, nothing loaded."""

    config: PipelineConfig
    path: Path
    raw: Any
    index_config: IndexConfig
    stage_specs: list[tuple[type[Stage], StageParams]] = field(default_factory=list)

    def where(self, loc: Sequence[Any]) -> str:
        """``file:line:col`` of a key in the pipeline file (or just the file)."""
        pos = position(self.raw, list(loc))
        return f"{self.path}:{pos[0]}:{pos[1]}" if pos else str(self.path)


def load_pipeline(path: str | Path, judge: bool = True) -> LoadedPipeline:
    """The validated pipeline; ``judge=False`` skips the useful-judge check (eval judges by qrels, and
    calibrates the very threshold the check might refuse)."""
    import ragcost.stages  # noqa: F401  (registers the built-in stages)

    p = Path(path)
    raw = read_yaml(p)
    if raw is None:
        raise ConfigError(f"{p}: the file is empty; see pipelines/quickstart.yaml for an example")
    config = validate(PipelineConfig, raw, str(p))
    lp = LoadedPipeline(config, p, raw, IndexConfig())
    lp.index_config = _at_store(lp, _index_config(lp))
    _check_redact(lp)
    _check_embed(lp)
    lp.stage_specs = _stage_specs(lp)
    if judge:
        _check_useful(lp, lp.stage_specs)
    return lp


def _index_config(lp: LoadedPipeline) -> IndexConfig:
    from ragcost.index import check_config, load_index_file

    cfg = lp.config
    if isinstance(cfg.index, str):
        ipath = resolve(lp.path.parent, cfg.index)
        if ipath is None:
            raise ConfigError(f"{lp.where(['index'])}: index: file {cfg.index!r} not found "
                              f"(looked beside the pipeline and in {Path.cwd()})")
        return load_index_file(ipath, precision=cfg.embed.precision)
    try:
        return check_config(cfg.index, precision=cfg.embed.precision)
    except ConfigError as e:
        field_ = tuple(getattr(e, "field", None) or ())
        dotted = ".".join(str(x) for x in field_)
        msg = f"index.{e}" if dotted and str(e).startswith(dotted) else f"index.{dotted}: {e}" if dotted else f"index: {e}"
        raise ConfigError(f"{lp.where(['index', *field_])}: {msg}") from None


def _at_store(lp: LoadedPipeline, config: IndexConfig) -> IndexConfig:
    """The index config told where the store keeps its chunks; a backend that lives in the store's
    database (pgvector) refuses a store of another kind here, at load, with file:line."""
    from ragcost.index import backend_class
    from ragcost.store import scheme_of
    from ragcost.store.sql_schema import chunk_table_name

    url = lp.config.store_url
    schemes = backend_class(config).store_schemes
    if not schemes:  # the backend keeps its own files: nothing to tell it
        return config
    if scheme_of(url) not in schemes:
        raise ConfigError(f"{lp.where(['store'])}: index backend {config.backend!r} keeps its vectors in the store's "
                          f"database, which must be {' or '.join(schemes)}, not {scheme_of(url)}; use store: "
                          "postgresql+psycopg://user@host:port/db, or another index backend (hnswlib, faiss)")
    return config.at_store(url, chunk_table_name(lp.config.name))


def _check_embed(lp: LoadedPipeline) -> None:
    from ragcost.embed import embedder_registry

    if lp.config.embed.type not in embedder_registry:
        raise ConfigError(f"{lp.where(['embed', 'type'])}: embed.type: unknown embedder {lp.config.embed.type!r}; "
                          f"installed: {embedder_registry.known()}")


def _check_redact(lp: LoadedPipeline) -> None:
    from ragcost.guards import redacting_checks

    try:
        redacting_checks(lp.config.redact)
    except ConfigError as e:
        raise ConfigError(f"{lp.where(['redact'])}: {e}") from None


def _stage_specs(lp: LoadedPipeline) -> list[tuple[type[Stage], StageParams]]:
    from ragcost.stages.base import stage_registry

    specs: list[tuple[type[Stage], StageParams]] = []
    for i, st in enumerate(lp.config.stages):
        try:
            stage_cls = stage_registry.get(st.type)
        except ConfigError as e:
            raise ConfigError(f"{lp.where(['stages', i, 'type'])}: stages.{i}.type: {e}") from None
        params = validate(stage_cls.Params, stage_params(st), str(lp.path), prefix=("stages", i), tree=lp.raw)
        specs.append((stage_cls, params))
    _check_placement(lp, specs)
    _check_routes(lp, specs)
    return specs


def _check_useful(lp: LoadedPipeline, specs: list[tuple[type[Stage], StageParams]]) -> None:
    """A useful-document judge that can never fire, or fires on everything, is refused at load."""
    from ragcost.stages.base import COSINE

    u = lp.config.useful
    if u.judge == "calibrated":
        from ragcost.cost.calibration import calibration_path, load

        path = calibration_path(lp.path, u.calibration)
        try:  # the file's own problems here, at load; its fingerprint once the embedder is at hand
            load(path, f"ragcost eval EVAL_SPEC --write (an eval spec whose pipeline is {lp.path})")
        except ConfigError as e:
            raise ConfigError(f"{lp.where(['useful', 'judge'])}: useful.judge: calibrated: {e}") from None
        return
    if u.judge == "cited":
        if not any(cls.makes_answer for cls, _ in specs):
            raise ConfigError(f"{lp.where(['useful', 'judge'])}: useful.judge: cited counts documents the answer cites, "
                              "but this pipeline has no generate stage; add one, or use judge: score")
        return
    scale, by = COSINE, "retrieve"  # the implicit embed + retrieve scores, unless a later stage re-scores
    for cls, params in specs:
        found = cls.scale_of(params)
        if found is not None:
            backend = getattr(params, "backend", None)
            scale, by = found, params.name or (f"{cls.type}:{backend}" if isinstance(backend, str) else cls.type)
    t = u.threshold
    fix = ("use useful: {judge: cited} with a generate stage, or a threshold calibrated by `ragcost eval` "
           "(it prints the score above which retrieved documents are relevant at useful.precision)")
    if t > scale.hi:
        raise ConfigError(f"{lp.where(['useful', 'threshold'])}: useful.threshold {t:g} can never be reached: the last "
                          f"scoring stage {by!r} gives {scale.note or scale.name} scores of at most {scale.hi:.4g}; {fix}")
    if t <= scale.lo:
        raise ConfigError(f"{lp.where(['useful', 'threshold'])}: useful.threshold {t:g} counts every document as useful: "
                          f"the last scoring stage {by!r} gives {scale.note or scale.name} scores of at least "
                          f"{scale.lo:.4g}; {fix}")


def _check_placement(lp: LoadedPipeline, specs: list[tuple[type[Stage], StageParams]]) -> None:
    """A stage that must answer before generation (a cache) is refused after it, or twice."""
    types = [cls.type for cls, _ in specs]
    for i, (cls, _) in enumerate(specs):
        if cls.placement != "before-generate":
            continue
        if types.count(cls.type) > 1 and types.index(cls.type) != i:
            raise ConfigError(f"{lp.where(['stages', i, 'type'])}: stages.{i}: a second {cls.type!r} stage; "
                              f"a pipeline has at most one, remove this one")
        if any(c.makes_answer for c, _ in specs[:i]):
            raise ConfigError(f"{lp.where(['stages', i, 'type'])}: stages.{i}: {cls.type!r} after generate cannot "
                              "save anything (the answer was already paid for); move it before retrieve/generate")


def _check_routes(lp: LoadedPipeline, specs: list[tuple[type[Stage], StageParams]]) -> None:
    """Route targets are the labels of generate stages: every name a route, a router, a labelled file,
    an ``escalate_to`` or a stage's ``target`` uses must be one, and escalation only goes forward."""
    from ragcost.stages.route import Route

    gens = {p.target: i for i, (cls, p) in enumerate(specs) if cls.makes_answer and p.target}
    routes = [i for i, (cls, _) in enumerate(specs) if cls is Route or issubclass(cls, Route)]
    known = ", ".join(gens) or "(none: give generate stages a target: label)"
    for i, (cls, p) in enumerate(specs):
        if p.target and p.target not in gens:
            raise ConfigError(f"{lp.where(['stages', i, 'target'])}: stages.{i}.target: no generate stage has target "
                              f"{p.target!r}; targets: {known}")
        if p.target and (not routes or routes[0] > i):
            raise ConfigError(f"{lp.where(['stages', i, 'target'])}: stages.{i}.target: {p.target!r} needs a route stage "
                              "before it (queries reach a target only when a router sends them); add {type: route, ...}")
        esc = getattr(p, "escalate_to", None)
        if esc:
            if esc not in gens:
                raise ConfigError(f"{lp.where(['stages', i, 'escalate_to'])}: stages.{i}.escalate_to: no generate stage has "
                                  f"target {esc!r}; targets: {known}")
            if gens[esc] <= i:
                raise ConfigError(f"{lp.where(['stages', i, 'escalate_to'])}: stages.{i}.escalate_to: the generate stage of "
                                  f"{esc!r} (stages.{gens[esc]}) must come after this stage; move it later")
    for i in routes:
        p = specs[i][1]
        named = [(("default",), p.default)] + [(where, t) for where, t in _router_targets(p)]
        for where, t in named:
            if t not in gens:
                raise ConfigError(f"{lp.where(['stages', i, *where])}: stages.{i}.{'.'.join(map(str, where))}: route target "
                                  f"{t!r} is not declared; declare a generate stage with target: {t}, or use one of: {known}")
        from ragcost.stages.route import router_registry

        # A labelled file's problems carry the file's own path:line; a missing file, the pipeline's.
        router_registry.get(p.router).check_files(p.router_params(), lp.path.parent, list(gens),
                                                  lambda where, i=i: f"{lp.where(['stages', i, *where])}: stages.{i}.{'.'.join(map(str, where))}")


def _router_targets(p: Any) -> list[tuple[tuple, str]]:
    from ragcost.stages.route import router_registry

    return router_registry.get(p.router).targets_named(p.router_params())
