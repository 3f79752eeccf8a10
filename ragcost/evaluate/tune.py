"""`ragcost tune`: the cheapest configuration whose quality is >= floor x the best measured, without the full grid.

The walk rests on one assumption the eval grid itself shows: exact search (flat, float32) at a
variant's largest dim is that variant's quality ceiling; a smaller dim, a coarser precision or an
approximate index only lose quality. So it
  1. measures each (embedder, chunking) variant at its ceiling and drops variants below the floor;
  2. per surviving variant walks dims down and precisions coarser on the flat index, stopping a
     dimension at the first configuration below the floor;
  3. for each approximate index at a (dim, precision) that passed, skips the build when even the
     ceiling's useful documents at no search time cost more than the cheapest passing configuration
     so far (dominated, as faiss's OperatingPoints drops points), else builds it once and sweeps
     its search parameters upward, stopping at the first value that reaches the exact search's
     results (larger values only add time) or when the built index is dominated by its bytes.
The cheapest passing configuration is ranked by $ per useful document, then p95, then bytes/vector.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ragcost.evaluate.grid import Variant, prefixed, variants
from ragcost.evaluate.run import DEFAULT_CACHE, ConfigResult, Progress, _noop, _prepare
from ragcost.evaluate.spec import Candidate, LoadedSpec

PRECISION_ORDER = ("float32", "float16", "int8", "binary")


@dataclass
class Step:
    result: ConfigResult
    verdict: str  # why the walk went on or stopped here


@dataclass
class TuneReport:
    floor: float
    quality: str
    steps: list[Step] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)  # branches skipped without a measurement, and why
    full_grid: int = 0
    best_quality: float = 0.0
    chosen: Optional[ConfigResult] = None
    baseline: Optional[ConfigResult] = None
    chosen_variant: Optional[Variant] = None
    best: Optional[ConfigResult] = None  # the best quality measured: every pass is judged against it, paired
    resampler: Any = None  # evaluate.intervals' shared resampler over the queries; None: too few, point estimates
    notes: list[str] = field(default_factory=list)

    @property
    def ran(self) -> int:
        return len(self.steps)

    def threshold(self) -> float:
        return self.floor * self.best_quality

    def passes(self, r: ConfigResult) -> bool:
        from ragcost.evaluate.intervals import within

        if self.best is None:
            return True
        return within(r, self.best, self.quality, self.floor, self.resampler)

    def relative(self, r: ConfigResult) -> Any:
        from ragcost.evaluate.intervals import relative_quality

        return None if self.best is None else relative_quality(r, self.best, self.quality, self.resampler)

    def savings(self) -> Optional[float]:
        """Fraction of the baseline's $ per useful document the chosen configuration saves."""
        b, c = self.baseline, self.chosen
        if not b or not c or not b.usd_per_useful or c.usd_per_useful is None:
            return None
        return 1 - c.usd_per_useful / b.usd_per_useful


def _rank(r: ConfigResult) -> tuple:
    return (r.usd_per_useful if r.usd_per_useful is not None else float("inf"), r.p95_ms, r.bytes_per_vector)


class _Walk:
    """The state of one tune: measured results, the floor, the incumbent."""

    def __init__(self, ls: LoadedSpec, floor: float, cache_dir: Path, progress: Progress) -> None:
        self.ls, self.q = ls, ls.spec.quality
        self.cache_dir, self.progress = cache_dir, progress
        self.report = TuneReport(floor, self.q)
        self.kth: dict[tuple[int, int], dict] = {}
        self.index_cache: dict[tuple, tuple[Any, float]] = {}

    # ---- measuring ------------------------------------------------------------------------

    def measure(self, vi: int, v: Variant, ev: Any, c: Candidate, index: Any = None, build_s: float = 0.0) -> ConfigResult:
        from ragcost.evaluate.metrics import exact_kth

        if (vi, c.dim) not in self.kth:
            self.kth = {(vi, c.dim): exact_kth(ev.queries_at(c.dim), ev.vectors_at(c.dim), ev.corpus.doc_of, ev.spec.k)}
        if index is None:
            index, build_s = ev.build(c)
        r = ev.measure(c, index, build_s, self.kth[(vi, c.dim)])
        r.name = prefixed(v.label, r.name)
        from ragcost.evaluate.intervals import attach_one

        attach_one(r, self.ls.spec.metric_names(), self.report.resampler)
        d = v.describe()
        r.embed, r.chunking = d["embed"], d["chunking"]
        if self.report.best is None or r.quality(self.q) > self.report.best_quality:
            self.report.best, self.report.best_quality = r, r.quality(self.q)
        self.progress(f"tried {r.name}", self.report.ran + 1, self.report.full_grid)
        return r

    def passes(self, r: ConfigResult) -> bool:
        """Within the floor: the interval of its quality relative to the best reaches it (the point, with too few queries)."""
        return self.report.passes(r)

    def step(self, r: ConfigResult, verdict: str) -> ConfigResult:
        self.report.steps.append(Step(r, verdict))
        return r

    def incumbent(self) -> Optional[ConfigResult]:
        ok = [s.result for s in self.report.steps if self.passes(s.result) and s.result.usd_per_useful is not None]
        return min(ok, key=_rank) if ok else None


def _is_flat(c: Candidate) -> bool:
    return c.index_config.kind == "flat"


def _reference(cands: list[Candidate]) -> Optional[Candidate]:
    """The variant's quality ceiling: flat, largest dim, float32 (else the finest precision there is)."""
    flats = [c for c in cands if _is_flat(c)]
    if not flats:
        return None
    return min(flats, key=lambda c: (-c.dim, PRECISION_ORDER.index(c.precision)))


def tune(ls: LoadedSpec, floor: float = 0.98, cache_dir: Path = DEFAULT_CACHE, progress: Progress = _noop) -> TuneReport:
    """Walk the spec's grid towards the cheapest configuration above ``floor`` x the best quality."""
    from ragcost.errors import ConfigError
    from ragcost.runtime.pipeline import Pipeline

    if not 0 < floor <= 1:
        raise ConfigError(f"--floor {floor}: give a fraction of the best quality in (0, 1], e.g. 0.98")
    walk = _Walk(ls, floor, cache_dir, progress)
    pipe = Pipeline.load(ls.pipeline_path, judge=False)  # tune judges by the qrels
    vs: list[Variant] = []
    try:
        vs = variants(ls.spec, pipe)
        prepared = []
        for v in vs:
            _, ev, cands = _prepare(ls, v.pipe, cache_dir, progress)
            prepared.append((v, ev, cands))
            walk.report.full_grid += len(cands)
        from ragcost.evaluate.intervals import resampler, too_few

        n = len(prepared[0][1].qids) if prepared else 0
        walk.report.resampler = resampler(n)
        if walk.report.resampler is None:
            walk.report.notes.append(too_few(n))
        if any(_reference(c) is None for _, _, c in prepared):
            raise ConfigError(f"{ls.path}: tune needs a flat index in the grid (the exact reference each branch is "
                              "compared with); add `- index: ../indexes/flat.yaml` to grid:")
        _walk_all(walk, prepared, pipe)
        return walk.report
    finally:
        for v in vs:
            if v.pipe is not pipe:
                v.pipe.close()
        pipe.close()


def _walk_all(walk: _Walk, prepared: list, pipe: Any) -> None:
    rep = walk.report
    refs = {}
    for vi, (v, ev, cands) in enumerate(prepared):  # 1. each variant at its ceiling
        refs[vi] = walk.step(walk.measure(vi, v, ev, _reference(cands)), "ceiling of this embedder/chunking (flat, exact)")
    for vi, (v, ev, cands) in enumerate(prepared):
        if not walk.passes(refs[vi]):
            rep.steps[vi].verdict += f"; below the floor {rep.threshold():.4f}: its cheaper configurations are not tried"
            continue
        passed = _walk_flat(walk, vi, v, ev, cands, refs[vi])  # 2. dims and precisions, exact search
        _walk_indexes(walk, vi, v, ev, cands, passed)  # 3. approximate indexes at the passing (dim, precision)
    _baseline(walk, prepared, pipe)
    from ragcost.evaluate.intervals import pick

    ok = [s.result for s in rep.steps if walk.passes(s.result) and s.result.usd_per_useful is not None]
    rep.chosen = pick(ok, walk.q, rep.floor, rep.resampler) if ok else None
    for vi, (v, _, _) in enumerate(prepared):
        if rep.chosen is not None and rep.chosen.embed == v.describe()["embed"] and rep.chosen.chunking == v.describe()["chunking"]:
            rep.chosen_variant = v


def _walk_flat(walk: _Walk, vi: int, v: Variant, ev: Any, cands: list[Candidate], ref: ConfigResult) -> dict:
    """Flat at each dim (largest first) and precision (finest first); returns {(dim, precision): result} that passed."""
    flats = {(c.dim, c.precision): c for c in cands if _is_flat(c)}
    dims = sorted({d for d, _ in flats}, reverse=True)
    passed: dict[tuple[int, str], ConfigResult] = {}
    ref_key = (ref.dim, ref.precision)
    for dim in dims:
        precs = sorted((p for d, p in flats if d == dim), key=PRECISION_ORDER.index)
        first_failed = False
        for i, prec in enumerate(precs):
            if (dim, prec) == ref_key:
                r = ref
            else:
                r = walk.step(walk.measure(vi, v, ev, flats[(dim, prec)]), "")
            if walk.passes(r):
                passed[(dim, prec)] = r
                if r is not ref:
                    walk.report.steps[-1].verdict = "above the floor: try coarser"
                continue
            rest = precs[i + 1:]
            if r is not ref:
                walk.report.steps[-1].verdict = "below the floor: stop precision" + (f" (skips {', '.join(rest)})" if rest else "")
            first_failed = i == 0
            break
        if first_failed:
            smaller = [d for d in dims if d < dim]
            if smaller:
                walk.report.steps[-1].verdict += f"; stop dim (skips {', '.join(map(str, smaller))})"
            break
    return passed


def _lower_bound(ev: Any, c: Candidate, ceiling: ConfigResult, index_bytes: Optional[int] = None) -> Optional[float]:
    """$ per useful document this build cannot beat: the ceiling's useful documents, no search time,
    the variant's query embedding, and its storage by the one formula the eval prices it with.

    Before the build (``index_bytes`` None) the storage is the float32 exact-scan copy alone: an index
    that holds every vector at float32 is at least that large, and any other index keeps the copy
    beside it. Once built, the index's own bytes, plus the copy only when the index does not hold it
    (as the eval prices it, ``_Evaluator._price``): a bound that counted the copy twice
    would call a cheaper float32 HNSW graph dominated and skip it.
    """
    from ragcost.cost.compute import cost_of, storage_cost_per_query
    from ragcost.cost.storage import holds_float32, storage_bytes
    from ragcost.records import UsageRecord

    if not ceiling.useful:
        return None
    nq = len(ev.qids)
    pipe = ev.pipe
    emb = UsageRecord(stage="embed", resource=pipe.config.embed.resource or pipe.config.resource,
                      wall_seconds=float(ev.qv.seconds[:nq].sum()), items=nq, cpu_seconds=ev.qv.cpu_seconds(nq),
                      input_tokens=int(ev.qv.tokens[:nq].sum()), cached_input_tokens=0)
    n = len(ev.corpus.labels)
    if index_bytes is None:
        ram_disk = storage_bytes(0, n, c.dim)
    else:
        held = holds_float32(c.index_config.backend, c.index_config.kind, c.precision)
        ram_disk = storage_bytes(index_bytes, n, c.dim, holds_vectors=held)
    storage = storage_cost_per_query(*ram_disk, ev.book) * nq
    return (cost_of(emb, ev.book) + storage) / ceiling.useful


def _walk_indexes(walk: _Walk, vi: int, v: Variant, ev: Any, cands: list[Candidate], passed: dict) -> None:
    """Each approximate build at a passing (dim, precision): pruned when dominated, else swept upward."""
    groups: dict[tuple, list[Candidate]] = {}
    for c in cands:
        if not _is_flat(c) and (c.dim, c.precision) in passed:
            groups.setdefault(c.build_key, []).append(c)
    for group in sorted(groups.values(), key=lambda g: (g[0].dim, PRECISION_ORDER.index(g[0].precision))):
        first = group[0]
        ceiling = passed[(first.dim, first.precision)]
        inc = walk.incumbent()
        lb = _lower_bound(ev, first, ceiling)
        label = prefixed(v.label, _build_label(first))
        if inc is not None and lb is not None and lb >= inc.usd_per_useful:
            walk.report.pruned.append(f"{label}: dominated before building (at best ${lb:.3g}/useful >= "
                                      f"${inc.usd_per_useful:.3g} of {inc.name}); {len(group)} configuration(s) skipped")
            continue
        index, build_s = ev.build(first)
        lb = _lower_bound(ev, first, ceiling, int(index.nbytes()))
        if inc is not None and lb is not None and lb >= inc.usd_per_useful:
            walk.report.pruned.append(f"{label}: dominated once built ({index.nbytes() / len(ev.corpus.labels):.0f} B/vector: "
                                      f"at best ${lb:.3g}/useful >= ${inc.usd_per_useful:.3g}); {len(group)} sweep value(s) skipped")
            continue
        _sweep(walk, vi, v, ev, group, index, build_s, ceiling)


def _build_label(c: Candidate) -> str:
    return f"{Path(c.index_file).stem} d{c.dim} {c.precision}"


def _sweep(walk: _Walk, vi: int, v: Variant, ev: Any, group: list[Candidate], index: Any, build_s: float,
           ceiling: ConfigResult) -> None:
    """Search parameters upward on one build; stop once the exact search's documents come back."""
    order = sorted(group, key=lambda c: tuple(float(x) for x in c.search.values() if isinstance(x, (int, float))))
    k0 = walk.ls.spec.k[0]
    for i, c in enumerate(order):
        r = walk.measure(vi, v, ev, c, index, build_s)
        rest = len(order) - i - 1
        recall = r.metrics.get(f"ann_recall@{k0}", 0.0)
        if recall >= 0.999 or r.useful >= ceiling.useful and r.quality(walk.q) >= ceiling.quality(walk.q):
            walk.step(r, "reaches exact search's results: stop sweep" + (f" (skips {rest} larger)" if rest else ""))
            return
        where = "above" if walk.passes(r) else "below"
        walk.step(r, f"{where} the floor: search wider" if rest else f"{where} the floor: the sweep's last value")


def _baseline(walk: _Walk, prepared: list, pipe: Any) -> None:
    """The pipeline's current configuration, from the walk when it was measured, else measured now."""
    v, ev, cands = prepared[0]
    for vv, e, cs in prepared:
        if vv.pipe is pipe:
            v, ev, cands = vv, e, cs
    icfg, dim, prec = pipe.index_config, pipe.dim, pipe.config.embed.precision
    want = (icfg.backend, icfg.kind, repr(sorted(icfg.build.items())), dim, prec, repr(sorted(icfg.search.items())))
    d = v.describe()
    for s in walk.report.steps:
        r = s.result
        if (r.backend, r.kind, repr(sorted(r.build.items())), r.dim, r.precision, repr(sorted(r.search.items()))) == want \
                and r.embed == d["embed"] and r.chunking == d["chunking"]:
            walk.report.baseline = r
            return
    c = Candidate(f"pipeline {icfg.kind} d{dim} {prec}", 0, str(pipe.path), icfg, dim, prec, dict(icfg.search))
    vi = next(i for i, (vv, _, _) in enumerate(prepared) if vv is v)
    walk.report.baseline = walk.step(walk.measure(vi, v, ev, c), "the pipeline's current configuration")


def summary_lines(rep: TuneReport) -> list[str]:
    """The walk as text: each configuration tried and why it went on or stopped there."""
    q = rep.quality
    rs = rep.resampler
    how = (f"within the floor: the {rs.level:.0%} interval of quality / best (paired bootstrap over {rs.n} queries, "
           f"{rs.resamples} resamples) reaches it; cheaper only beyond the noise" if rs is not None else "point estimates")
    out = [f"best {q} measured: {rep.best_quality:.4f}; floor {rep.floor:g} x best = {rep.threshold():.4f} ({how})",
           *rep.notes, ""]
    for i, s in enumerate(rep.steps, 1):
        r = s.result
        usd = "n/a" if r.usd_per_useful is None else f"${r.usd_per_useful:.3g}"
        mark = "ok " if rep.passes(r) else "low"
        rel = rep.relative(r)
        ci = f" [{r.ci[q][0]:.4f}, {r.ci[q][1]:.4f}]" if q in r.ci else ""
        vs = f" ({rel.estimate:.1%} of best, up to {rel.hi:.1%})" if rel is not None else ""
        out.append(f"{i:>3}. {mark} {r.name:<40} {q} {r.quality(q):.4f}{ci}{vs}  {usd}/useful  p95 {r.p95_ms:.2f} ms  "
                   f"{r.bytes_per_vector:,.0f} B/vec  -> {s.verdict}")
    out.extend(f"     skipped {p}" for p in rep.pruned)
    return out

