"""`ragcost eval SPEC --ablate`: what each optional stage of the pipeline buys, and at what price.

The spec's pipeline runs over the spec's judged queries on its own index config (built once on
the eval cache's vectors): retrieval as `ragcost eval` times it (the retrieve stage's k
documents), then the pipeline's later stages in order, run by the same runner as `ragcost query`
(priced by the same price book). Then once more without each optional stage (rerank -- hybrid,
rescore, cross-encoder --, guard), every other stage kept. A cache or route stage is refused in
one line: both need the generate stage (and a cache its cache_write), which eval does not run.
Per stage removed:

- Δquality = full - without, paired over the same queries (bootstrap interval, sign-flip p);
- Δ$ per query and its share of the without-run's $;
- $ per marginal useful document = the extra dollars / the extra useful documents (none when the
  stage adds no useful document).

A stage that ran before retrieval in the pipeline (a query guard, a cache, a route) runs here on
queries that already hold their retrieved documents: what it blocks delivers nothing, but the
retrieval a blocked query would have skipped is still charged. A hybrid stage's BM25 index is
not in the storage $ (eval prices the vector index and its float32 copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ragcost.errors import ConfigError
from ragcost.evaluate.run import DEFAULT_CACHE, ConfigResult, EvalRun, Progress, _noop, _prepare
from ragcost.evaluate.spec import Candidate, LoadedSpec

@dataclass
class StageSpec:
    position: int
    label: str
    cls: type
    params: Any


def label_of(cls: Any, params: Any) -> str:
    """hybrid, rescore, cross-encoder, guard (query: pii, prompt_injection), cache, route: the stage's own label."""
    return cls.label(params)


def optional_stages(specs: list[tuple[Any, Any]]) -> list[StageSpec]:
    """The stages the pipeline answers without (``Stage.optional``): each one ablation leaves out."""
    return [StageSpec(i, label_of(cls, p), cls, p) for i, (cls, p) in enumerate(specs) if cls.optional]


def run_ablation(ls: LoadedSpec, cache_dir: Path = DEFAULT_CACHE, progress: Progress = _noop,
                 traffic: Optional[str] = None) -> EvalRun:
    """The full pipeline and the pipeline without each optional stage, as one eval run with ``ablation`` rows."""
    from ragcost.evaluate.intervals import attach, resampler
    from ragcost.evaluate.metrics import exact_kth
    from ragcost.evaluate.bootstrap import MIN_QUERIES
    from ragcost.runtime.pipeline import Pipeline

    from time import perf_counter

    t0 = perf_counter()
    pipe = Pipeline.load(ls.pipeline_path, judge=False)
    try:
        specs = list(pipe.loaded.stage_specs)
        names = ", ".join(cls.type for cls, _ in specs) or "none"
        retrieve = next((i for i, (cls, _) in enumerate(specs) if cls.fetches_hits), None)
        if retrieve is None:
            raise ConfigError(f"--ablate: {ls.pipeline_path}: the pipeline has no retrieve stage to evaluate (stages: {names})")
        optional = optional_stages(specs)
        unrun = [o for o in optional if o.cls.eval_skips]
        if unrun:
            raise ConfigError(f"--ablate: {ls.pipeline_path}: stage {unrun[0].label!r}: eval does not run a {unrun[0].cls.type} "
                              f"stage yet ({unrun[0].cls.eval_skips}); ablate a copy of the pipeline without it")
        if not optional:
            raise ConfigError(f"--ablate: {ls.pipeline_path}: no optional stage to remove (stages: {names}); add a "
                              "rerank (e.g. {type: rerank, backend: hybrid}), guard, cache or route stage, or drop --ablate")
        run, ev, _ = _prepare(ls, pipe, cache_dir, progress, traffic=traffic)
        if len(ev.qids) < MIN_QUERIES:
            raise ConfigError(f"--ablate: {ls.path}: {len(ev.qids)} judged queries; intervals need at least {MIN_QUERIES} "
                              "(raise --max-queries / max_queries, or judge more queries)")
        k = specs[retrieve][1].k
        others = [(i, cls, p) for i, (cls, p) in enumerate(specs) if i != retrieve]
        icfg = pipe.index_config
        c = Candidate(f"pipeline {icfg.kind} d{pipe.dim}", 0, str(pipe.path), icfg, min(pipe.dim, run.native_dim),
                      pipe.config.embed.precision, dict(icfg.search))
        kth = exact_kth(ev.queries_at(c.dim), ev.vectors_at(c.dim), ev.corpus.doc_of, ev.spec.k)
        index, build_s = ev.build(c)
        ev.reuse_retrieval = True
        variants = [("full pipeline", None), *((f"without {o.label}", o) for o in optional)]
        results: list[ConfigResult] = []
        for n, (name, removed) in enumerate(variants):
            progress(f"searching {name}", n, len(variants))
            stages = [(cls, p) for i, cls, p in others if removed is None or i != removed.position]
            r = ev.measure(c, index, build_s, kth, stages=stages, want=max(k, max(ev.spec.k)))
            r.name = name
            results.append(r)
        progress("configurations", len(variants), len(variants))
        run.results = results
        attach(run)
        rs = resampler(len(ev.qids))
        run.ablation = [ablation_row(results[0], r, o, run.quality, rs) for r, (_, o) in zip(results[1:], variants[1:])]
        run.wall_seconds = perf_counter() - t0
        return run
    finally:
        pipe.close()


def ablation_row(full: ConfigResult, without: ConfigResult, stage: StageSpec, quality: str, rs: Any) -> dict[str, Any]:
    """What the stage buys: full - without, paired; its $ and $ per marginal useful document."""
    p = rs.paired(without.per_query[quality], full.per_query[quality])
    d_usd = full.total_usd - without.total_usd
    nq = max(full.queries, 1)
    rel = d_usd / without.total_usd if without.total_usd > 0 else float("nan")
    d_useful = full.useful - without.useful
    marginal: Optional[float] = d_usd / d_useful if d_useful > 0 else None
    verdict = "significant" if p.significant else "not significant"
    word = "better" if p.diff.estimate > 0 else "worse"
    delta_text = f"{p.diff.estimate:+.4f} {quality} [{p.diff.lo:+.4f}, {p.diff.hi:+.4f}]"
    usd_text = f"{d_usd / nq:+.3g} $/query ({rel:+.1%})"
    marginal_text = (f"${marginal:.3g} per marginal useful document ({d_useful:+d})" if marginal is not None else
                     f"no marginal useful document ({d_useful:+d})")
    line = (f"{stage.label}: {delta_text} for {rel:+.1%} $ ({d_usd / nq:+.3g} $/query), p={p.p:.2g}: "
            f"{word if p.significant else 'not significant'}; {marginal_text}")
    return {"stage": stage.label, "config": without.name, "quality": quality, "delta": p.diff.estimate,
            "ci": p.diff.to_list(), "p": p.p, "significant": p.significant, "delta_usd_per_query": d_usd / nq,
            "delta_usd_rel": rel, "delta_useful": d_useful, "usd_per_marginal_useful": marginal,
            "delta_text": delta_text, "usd_text": usd_text, "marginal_text": marginal_text, "verdict": verdict, "line": line}
