"""`ragcost tune`: eval's pick (same objective, same rule) without measuring the whole grid.

The objective and rule are eval's (``evaluate.intervals.pick``): within ``floor`` x the best quality
by the paired interval, then the best quality among the configurations not significantly dearer
than the cheapest. The default floor is the spec's ``within_pct`` (1 - within_pct / 100), so
`ragcost eval SPEC` and `ragcost tune SPEC` answer the same question.

The walk skips configurations on four named assumptions (``ASSUMPTIONS``), each recorded with
what it skipped:
  1. each (embedder, chunking) variant is measured at its ceiling (flat, largest dim, finest
     precision); a variant below the floor there is not walked (``ceiling``);
  2. each flat grid entry (entries sharing an index file stay distinct) walks dims down and
     precisions coarser, stopping a dimension at the first configuration below the floor
     (``coarser-loses``);
  3. approximate indexes are built only at a (dim, precision) whose exact search passed
     (``ceiling``); a build whose $ per useful document at the exact search's useful documents and
     no search time is beyond the noise above the cheapest passing one is not built
     (``exact-bound``: the noise is the paired interval's plus the served passes' own spread,
     ``ConfigResult.served_noise``); a sweep stops at the first value that returns exact search's
     documents (``wider-adds-time``).
Then every assumption is checked on the data (``_verify``): passively, by the largest gain the
measured configurations show against it (an int8 above its float32, d192 above d384, an HNSW
above flat: a skip whose stopping configuration is within that gain of the floor no longer
stands; a sweep whose stopping value is priced within the served passes' noise of the pick no longer
stands either: a wider value can come out cheaper by the machine alone), and actively, by measuring
the skipped neighbours of the pick and of the best (one dim, one precision, one sweep value away).
An assumption that fails is named with its evidence and everything it skipped is measured; the pick
is taken again until no check changes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ragcost.evaluate.grid import Variant, prefixed, variants
from ragcost.evaluate.run import DEFAULT_CACHE, ConfigResult, Progress, _noop, _prepare
from ragcost.evaluate.spec import Candidate, LoadedSpec

PRECISION_ORDER = ("float32", "float16", "int8", "binary")

ASSUMPTIONS = {
    "ceiling": "no configuration beats exact search at its (dim, precision), nor its variant's exact search at "
               "the largest dim and finest precision",
    "coarser-loses": "a smaller dim or a coarser precision of one index only loses quality",
    "exact-bound": "an approximate index finds no more useful documents than exact search at its dim and precision",
    "wider-adds-time": "a search wider than one that returns exact search's documents returns them again, at more time",
}


@dataclass
class Step:
    result: ConfigResult
    verdict: str  # why the walk went on or stopped here


@dataclass
class Skip:
    """Configurations not measured, the assumption that allowed it, and the measured result it rests on."""

    assumption: str
    why: str
    vi: int
    cands: list[Candidate]
    stop: Optional[ConfigResult] = None  # the measured configuration below the floor the skip rests on
    variant: bool = False  # a whole variant: opening it walks it
    at: Optional[tuple[int, str]] = None  # an approximate build skipped for its exact search at this (dim, precision)
    bound: Optional[float] = None  # exact-bound: the $ per useful document the skipped builds cannot beat
    opened: str = ""  # the failed check that made the walk measure it after all

    @property
    def names(self) -> set[str]:
        return {c.name for c in self.cands}


@dataclass
class TuneReport:
    floor: float
    quality: str
    steps: list[Step] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)  # each assumption checked on the data: held or failed, and why
    failed: list[str] = field(default_factory=list)  # the assumptions that failed on this data
    full_grid: int = 0
    best_quality: float = 0.0
    chosen: Optional[ConfigResult] = None
    baseline: Optional[ConfigResult] = None
    chosen_variant: Optional[Variant] = None
    best: Optional[ConfigResult] = None  # the best quality measured: every pass is judged against it, paired
    resampler: Any = None  # evaluate.intervals' shared resampler over the queries; None: too few, point estimates
    power: Any = None  # evaluate.power.FloorPower: what the judgments can detect of the floor
    notes: list[str] = field(default_factory=list)
    traffic: dict = field(default_factory=dict)  # the traffic every $ of the walk is priced at (evaluate.traffic)

    @property
    def ran(self) -> int:
        return len(self.steps)

    @property
    def pruned(self) -> list[str]:
        """Skips still standing, one line each: what was not measured and on which assumption."""
        return [f"{s.why}; {len(s.cands)} configuration(s) [{s.assumption}]" for s in self.skips if not s.opened]

    def results(self) -> list[ConfigResult]:
        return [s.result for s in self.steps]

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

    def above(self, r: ConfigResult) -> bool:
        """Shown above the floor by the judgments: the whole interval of quality / best is at or over it."""
        rel = self.relative(r)
        if rel is None:
            return self.passes(r)
        return rel.lo >= self.floor - 1e-12

    def savings(self) -> Optional[float]:
        """Fraction of the baseline's $ per useful document the chosen configuration saves."""
        b, c = self.baseline, self.chosen
        if not b or not c or not b.usd_per_useful or c.usd_per_useful is None:
            return None
        return 1 - c.usd_per_useful / b.usd_per_useful


class _Walk:
    """The state of one tune: measured results, the floor, the incumbent."""

    def __init__(self, ls: LoadedSpec, floor: float, cache_dir: Path, progress: Progress,
                 measured: Optional[dict[str, ConfigResult]] = None) -> None:
        self.ls, self.q = ls, ls.spec.quality
        self.cache_dir, self.progress = cache_dir, progress
        self.report = TuneReport(floor, self.q)
        self.kth: dict[tuple[int, int], dict] = {}
        self.done: dict[tuple[int, str], ConfigResult] = {}
        self.replay = measured  # results of an eval of the same spec: the walk's decisions without new timings
        self.prepared: list = []

    # ---- measuring ------------------------------------------------------------------------

    def measure(self, vi: int, c: Candidate, index: Any = None, build_s: float = 0.0) -> ConfigResult:
        from ragcost.evaluate.intervals import attach_one
        from ragcost.evaluate.metrics import exact_kth

        if (vi, c.name) in self.done:
            return self.done[(vi, c.name)]
        v, ev, _ = self.prepared[vi]
        name = prefixed(v.label, c.name)
        if self.replay is not None:
            if name not in self.replay:
                from ragcost.errors import ConfigError

                raise ConfigError(f"tune: {name} is not among the recorded results; record an eval of the same spec")
            r = self.replay[name]
        else:
            if (vi, c.dim) not in self.kth:
                self.kth = {(vi, c.dim): exact_kth(ev.queries_at(c.dim), ev.vectors_at(c.dim), ev.corpus.doc_of, ev.spec.k)}
            if index is None:
                index, build_s = ev.build(c)
            r = ev.measure(c, index, build_s, self.kth[(vi, c.dim)])
            r.name = name
            d = v.describe()
            r.embed, r.chunking = d["embed"], d["chunking"]
        attach_one(r, self.ls.spec.metric_names(), self.report.resampler)
        self.done[(vi, c.name)] = r
        for s in self.report.skips:  # measured after all (a check): no longer skipped
            if s.vi == vi and c.name in s.names and len(s.cands) > 1:
                s.cands = [x for x in s.cands if x.name != c.name]
            elif s.vi == vi and c.name in s.names and not s.opened:
                s.opened = "measured as a check"
        if self.report.best is None or r.quality(self.q) > self.report.best_quality:
            self.report.best, self.report.best_quality = r, r.quality(self.q)
        self.progress(f"tried {r.name}", self.report.ran + 1, self.report.full_grid)
        return r

    def index_bytes(self, vi: int, c: Candidate) -> tuple[Any, float, int]:
        """(index or None, build seconds, bytes) of the build ``c`` is searched on; replayed: the recorded bytes."""
        if self.replay is not None:
            v = self.prepared[vi][0]
            return None, 0.0, int(self.replay[prefixed(v.label, c.name)].index_bytes)
        index, build_s = self.prepared[vi][1].build(c)
        return index, build_s, int(index.nbytes())

    def passes(self, r: ConfigResult) -> bool:
        """Within the floor: the interval of its quality relative to the best reaches it (the point, with too few queries)."""
        return self.report.passes(r)

    def step(self, r: ConfigResult, verdict: str) -> ConfigResult:
        if all(s.result is not r for s in self.report.steps):
            self.report.steps.append(Step(r, verdict))
        return r

    def skip(self, assumption: str, why: str, vi: int, cands: list[Candidate], stop: Optional[ConfigResult] = None,
             variant: bool = False, at: Optional[tuple[int, str]] = None, bound: Optional[float] = None) -> None:
        cands = [c for c in cands if (vi, c.name) not in self.done]
        if cands:
            self.report.skips.append(Skip(assumption, why, vi, cands, stop, variant, at, bound))

    def incumbent(self) -> Optional[ConfigResult]:
        ok = [s.result for s in self.report.steps if self.passes(s.result) and s.result.usd_per_useful is not None]
        return min(ok, key=_rank) if ok else None

    def pick(self) -> Optional[ConfigResult]:
        """eval's pick (``intervals.pick``) over every configuration measured so far."""
        from ragcost.evaluate.intervals import pick

        rs = self.report.results()
        return pick(rs, self.q, self.report.floor, self.report.resampler) if rs else None


def _rank(r: ConfigResult) -> tuple:
    return (r.usd_per_useful if r.usd_per_useful is not None else float("inf"), r.p95_ms, r.bytes_per_vector)


def _is_flat(c: Candidate) -> bool:
    return c.index_config.kind == "flat"


def _fineness(c: Candidate) -> tuple:
    return (-c.dim, PRECISION_ORDER.index(c.precision))


def _reference(cands: list[Candidate]) -> Optional[Candidate]:
    """The variant's quality ceiling: the first flat grid entry at its largest dim and finest precision."""
    flats = [c for c in cands if _is_flat(c)]
    if not flats:
        return None
    entry = min(c.entry for c in flats if c.rerank is None) if any(c.rerank is None for c in flats) else min(c.entry for c in flats)
    return min((c for c in flats if c.entry == entry), key=_fineness)


def tune(ls: LoadedSpec, floor: Optional[float] = None, cache_dir: Path = DEFAULT_CACHE, progress: Progress = _noop,
         measured: Optional[list[ConfigResult]] = None, traffic: Optional[str] = None) -> TuneReport:
    """Walk the spec's grid to eval's pick: within ``floor`` x the best quality (default: the spec's within_pct).

    ``traffic``: one, serve or a batch size, as eval's (:mod:`ragcost.evaluate.traffic`); None: the pipeline's.
    Every $ of the walk is priced at it, the bound that skips a build included: a bound taken at another
    traffic than the measurements it is compared with is no bound (one at a time, a query's embedding
    costs several times what it does in batches of 64).
    ``measured``: an eval run's results of this spec (``run_eval(ls, traffic=...).results``, at the same
    ``traffic``): the walk takes each configuration's measurement from them instead of timing it again, so
    its decisions alone are compared.
    """
    from ragcost.errors import ConfigError
    from ragcost.runtime.pipeline import Pipeline

    if floor is None:
        floor = 1 - ls.spec.within_pct / 100.0
    if not 0 < floor <= 1:
        raise ConfigError(f"--floor {floor}: give a fraction of the best quality in (0, 1], e.g. 0.98")
    replay = {r.name: r for r in measured if r.status == "ok"} if measured is not None else None
    walk = _Walk(ls, floor, cache_dir, progress, replay)
    pipe = Pipeline.load(ls.pipeline_path, judge=False)  # tune judges by the qrels
    vs: list[Variant] = []
    try:
        vs = variants(ls.spec, pipe)
        for v in vs:
            vrun, ev, cands = _prepare(ls, v.pipe, cache_dir, progress, traffic=traffic)
            walk.report.traffic = vrun.traffic
            walk.prepared.append((v, ev, cands))
            walk.report.full_grid += len(cands)
        from ragcost.evaluate.intervals import resampler, too_few

        n = len(walk.prepared[0][1].qids) if walk.prepared else 0
        walk.report.resampler = resampler(n)
        if walk.report.resampler is None:
            walk.report.notes.append(too_few(n))
        if any(_reference(c) is None for _, _, c in walk.prepared):
            raise ConfigError(f"{ls.path}: tune needs a flat index in the grid (the exact reference each branch is "
                              "compared with); add `- index: ../indexes/flat.yaml` to grid:")
        _walk_all(walk, pipe)
        return walk.report
    finally:
        for v in vs:
            if v.pipe is not pipe:
                v.pipe.close()
        pipe.close()


def _walk_all(walk: _Walk, pipe: Any) -> None:
    rep = walk.report
    refs = {}
    for vi, (_, _, cands) in enumerate(walk.prepared):  # 1. each variant at its ceiling
        refs[vi] = walk.step(walk.measure(vi, _reference(cands)), "ceiling of this embedder/chunking (flat, exact)")
    for vi, (v, _, cands) in enumerate(walk.prepared):
        if not walk.passes(refs[vi]):
            step = next(s for s in rep.steps if s.result is refs[vi])
            step.verdict += f"; below the floor {rep.threshold():.4f}: its other configurations are not tried"
            walk.skip("ceiling", f"{v.label or 'variant'}: its ceiling is below the floor", vi,
                      [c for c in cands if c.name != _reference(cands).name], refs[vi], variant=True)
            continue
        _walk_variant(walk, vi)
    _verify(walk)
    _baseline(walk, pipe)
    rep.chosen = walk.pick()
    from ragcost.evaluate.power import floor_power

    rep.power = floor_power(rep.results(), rep.best, walk.q, rep.floor, rep.resampler)
    for v, _, _ in walk.prepared:
        if rep.chosen is not None and rep.chosen.embed == v.describe()["embed"] and rep.chosen.chunking == v.describe()["chunking"]:
            rep.chosen_variant = v


def _walk_variant(walk: _Walk, vi: int) -> None:
    """2. each flat grid entry (dims, precisions); 3. approximate indexes at the (dim, precision) exact search passed."""
    cands = walk.prepared[vi][2]
    passed: dict[tuple[int, str], ConfigResult] = {}
    for entry in sorted({c.entry for c in cands if _is_flat(c)}):
        for key, r in _walk_flat(walk, vi, [c for c in cands if _is_flat(c) and c.entry == entry]).items():
            if key not in passed or r.useful > passed[key].useful:
                passed[key] = r
    _walk_indexes(walk, vi, cands, passed)


def _walk_flat(walk: _Walk, vi: int, flats: list[Candidate]) -> dict:
    """One flat grid entry at each dim (largest first) and precision (finest first); {(dim, precision): result} that passed."""
    by = {(c.dim, c.precision): c for c in flats}
    label = prefixed(walk.prepared[vi][0].label, Path(flats[0].index_file).stem)
    dims = sorted({d for d, _ in by}, reverse=True)
    passed: dict[tuple[int, str], ConfigResult] = {}
    for dim in dims:
        precs = sorted((p for d, p in by if d == dim), key=PRECISION_ORDER.index)
        for i, prec in enumerate(precs):
            fresh = (vi, by[(dim, prec)].name) not in walk.done
            r = walk.measure(vi, by[(dim, prec)])
            if walk.passes(r):
                passed[(dim, prec)] = r
                walk.step(r, "above the floor: try coarser" if fresh else "")
                continue
            rest = [by[(dim, p)] for p in precs[i + 1:]]
            smaller = [c for c in flats if c.dim < dim] if i == 0 else []
            walk.step(r, "below the floor: stop precision" + (f" (skips {', '.join(c.precision for c in rest)})" if rest else "")
                      + (f"; stop dim (skips {', '.join(map(str, sorted({c.dim for c in smaller}, reverse=True)))})" if smaller else ""))
            walk.skip("coarser-loses", f"{label}: coarser than {r.name}, below the floor", vi, rest + smaller, r)
            break
        else:
            continue
        if i == 0:
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


def _dominated(lb: Optional[float], inc: Optional[ConfigResult]) -> bool:
    """Beyond the noise above the incumbent even at its bound: eval's rule would call it dearer.
    Twice the margin a saving must clear, as a bound's own estimate is a point, not an interval, and twice the
    spread of the incumbent's served passes: a configuration priced in passes that far apart can come out that
    much cheaper by the machine alone (8 questions one at a time under load: 11%)."""
    from ragcost.evaluate.intervals import margin

    return inc is not None and lb is not None and inc.usd_per_useful is not None \
        and lb >= inc.usd_per_useful * (1 + 2 * margin(inc, inc) + 2 * inc.served_noise)


def _walk_indexes(walk: _Walk, vi: int, cands: list[Candidate], passed: dict) -> None:
    """Each approximate build at a passing (dim, precision): pruned when dominated, else swept upward."""
    v, ev, _ = walk.prepared[vi]
    groups: dict[tuple, list[Candidate]] = {}
    for c in cands:
        if not _is_flat(c):
            groups.setdefault((c.entry, c.build_key), []).append(c)  # entries sharing an index file stay distinct
    for group in sorted(groups.values(), key=lambda g: (_fineness(g[0]), g[0].entry)):
        first = group[0]
        label = prefixed(v.label, _build_label(first))
        ceiling = passed.get((first.dim, first.precision))
        if ceiling is None:
            flat = _flat_at(walk, vi, first.dim, first.precision)
            walk.skip("ceiling", f"{label}: exact search at d{first.dim} {first.precision} "
                      + ("is below the floor" if flat is not None else "was not measured"), vi, group, flat,
                      at=(first.dim, first.precision))
            continue
        if all((vi, c.name) in walk.done for c in group):
            continue
        inc = walk.incumbent()
        lb = _lower_bound(ev, first, ceiling)
        if _dominated(lb, inc):
            walk.skip("exact-bound", f"{label}: dominated before building (at best ${lb:.3g}/useful, "
                      f"${inc.usd_per_useful:.3g} of {inc.name})", vi, group, ceiling, bound=lb)
            continue
        index, build_s, nbytes = walk.index_bytes(vi, first)
        lb = _lower_bound(ev, first, ceiling, nbytes)
        if _dominated(lb, inc):
            walk.skip("exact-bound", f"{label}: dominated once built ({nbytes / len(ev.corpus.labels):.0f} B/vector: "
                      f"at best ${lb:.3g}/useful, ${inc.usd_per_useful:.3g} of {inc.name})", vi, group, ceiling, bound=lb)
            continue
        _sweep(walk, vi, group, index, build_s, ceiling)


def _flat_at(walk: _Walk, vi: int, dim: int, precision: str) -> Optional[ConfigResult]:
    """The measured exact search at (dim, precision) with the most useful documents, if any."""
    rs = [r for (i, _), r in walk.done.items() if i == vi and r.kind == "flat" and (r.dim, r.precision) == (dim, precision)]
    return max(rs, key=lambda r: r.useful) if rs else None


def _build_label(c: Candidate) -> str:
    return f"{Path(c.index_file).stem} d{c.dim} {c.precision}"


def _sweep_order(group: list[Candidate]) -> list[Candidate]:
    return sorted(group, key=lambda c: tuple(float(x) for x in c.search.values() if isinstance(x, (int, float))))


def _sweep(walk: _Walk, vi: int, group: list[Candidate], index: Any, build_s: float, ceiling: ConfigResult) -> None:
    """Search parameters upward on one build; stop once the exact search's documents come back."""
    order = _sweep_order(group)
    k0 = walk.ls.spec.k[0]
    for i, c in enumerate(order):
        r = walk.measure(vi, c, index, build_s)
        rest = order[i + 1:]
        recall = r.metrics.get(f"ann_recall@{k0}", 0.0)
        if recall >= 0.999 or r.useful >= ceiling.useful and r.quality(walk.q) >= ceiling.quality(walk.q):
            walk.step(r, "reaches exact search's results: stop sweep" + (f" (skips {len(rest)} larger)" if rest else ""))
            walk.skip("wider-adds-time", f"{prefixed(walk.prepared[vi][0].label, _build_label(c))}: wider than {c.name}", vi, rest, r)
            return
        where = "above" if walk.passes(r) else "below"
        walk.step(r, f"{where} the floor: search wider" if rest else f"{where} the floor: the sweep's last value")


# ---- checking the assumptions on the data ---------------------------------------------------

def _gains(walk: _Walk) -> dict[str, tuple[float, str]]:
    """Per assumption, the largest ratio of quality (useful documents for exact-bound) by which a measured
    configuration beat the one the assumption says it cannot beat, with the pair as evidence (1.0: none)."""
    q = walk.q
    out = {"ceiling": (1.0, ""), "coarser-loses": (1.0, ""), "exact-bound": (1.0, "")}

    def note(key: str, hi: Any, lo: Any, a: float, b: float) -> None:
        if b > 0 and a / b > out[key][0]:
            out[key] = (a / b, f"{hi.name} {a:.4g} > {lo.name} {b:.4g}")

    by_vi: dict[int, list[ConfigResult]] = {}
    for (vi, _), r in walk.done.items():
        by_vi.setdefault(vi, []).append(r)
    for vi, rs in by_vi.items():
        ref = walk.done.get((vi, _reference(walk.prepared[vi][2]).name))
        for r in rs:
            if ref is not None and r is not ref:
                note("ceiling", r, ref, r.quality(q), ref.quality(q))
            if r.kind != "flat":
                flat = _flat_at(walk, vi, r.dim, r.precision)
                if flat is not None:
                    note("ceiling", r, flat, r.quality(q), flat.quality(q))
                    note("exact-bound", r, flat, r.useful, flat.useful)
                continue
            for o in rs:  # o one step coarser than r on the same flat index file
                if o.kind == "flat" and o.index_file == r.index_file and o.rerank == r.rerank and (
                        (o.dim == r.dim and PRECISION_ORDER.index(o.precision) > PRECISION_ORDER.index(r.precision))
                        or (o.precision == r.precision and o.dim < r.dim)):
                    note("coarser-loses", o, r, o.quality(q), r.quality(q))
    return out


def _passively_failed(walk: _Walk, s: Skip, gains: dict, chosen: Optional[ConfigResult]) -> Optional[str]:
    """Why the data no longer support this skip, or None."""
    if s.at is not None:  # measured since: the exact search at the build's (dim, precision)
        s.stop = _flat_at(walk, s.vi, *s.at)
        if s.stop is not None and walk.passes(s.stop):
            return f"exact search at d{s.at[0]} {s.at[1]} ({s.stop.name}) is within the floor after all"
    if s.assumption in ("ceiling", "coarser-loses") and s.stop is not None:
        gain, ev = gains[s.assumption]
        rel = walk.report.relative(s.stop)
        hi = rel.hi if rel is not None else s.stop.quality(walk.q) / walk.report.best_quality
        if gain > 1 and hi * gain >= walk.report.floor - 1e-12:
            return (f"{ev} ({gain - 1:.2%} better); {s.stop.name}, which the skip rests on, reaches "
                    f"{hi * gain:.1%} of the best with that gain, the floor is {walk.report.floor:.1%}")
    if s.assumption == "wider-adds-time" and chosen is not None and s.stop is not None \
            and s.stop.usd_per_useful is not None and not _dominated(s.stop.usd_per_useful, chosen):
        # a wider value returns the same documents at a little more search time: within the measurement's noise
        # of the pick it can be priced below it, and eval, measuring it, would pick it
        return (f"{s.stop.name}, where the sweep stopped, is priced within the measurement's noise of the pick "
                f"{chosen.name} (${s.stop.usd_per_useful:.3g} against ${chosen.usd_per_useful:.3g}, served passes "
                f"{chosen.served_noise:.1%} apart): a wider value can be priced below the pick")
    if s.assumption == "exact-bound" and chosen is not None and chosen.usd_per_useful is not None:
        gain, ev = gains["exact-bound"]
        v, evr, _ = walk.prepared[s.vi]
        first = s.cands[0]
        lb = _lower_bound(evr, first, s.stop) if s.stop is not None else None
        if gain > 1 and lb is not None and not _dominated(lb / gain, chosen):
            return f"{ev} useful documents: the bound no longer holds the build above the noise over {chosen.name}"
    return None


def _neighbours(walk: _Walk, r: ConfigResult) -> list[tuple[Skip, Candidate]]:
    """Skipped configurations one step from r on its grid entry: a dim, a precision or a sweep value away."""
    vi = next((i for (i, n), x in walk.done.items() if x is r), None)
    if vi is None:
        return []
    cands = walk.prepared[vi][2]
    me = next(c for c in cands if prefixed(walk.prepared[vi][0].label, c.name) == r.name or c.name == r.name)
    same = [c for c in cands if c.entry == me.entry and c.index_file == me.index_file]
    dims = sorted({c.dim for c in same}, reverse=True)
    precs = sorted({c.precision for c in same}, key=PRECISION_ORDER.index)
    near = []
    for c in same:
        if c.dim == me.dim and c.precision == me.precision and c.search != me.search:
            order = _sweep_order([x for x in same if (x.dim, x.precision) == (me.dim, me.precision)])
            if abs(order.index(c) - order.index(me)) == 1:
                near.append(c)
        elif c.search == me.search and (
                (c.precision == me.precision and abs(dims.index(c.dim) - dims.index(me.dim)) == 1)
                or (c.dim == me.dim and abs(precs.index(c.precision) - precs.index(me.precision)) == 1)):
            near.append(c)
    if not _is_flat(me):  # and the exact search it is measured against
        near += [c for c in cands if _is_flat(c) and (c.dim, c.precision) == (me.dim, me.precision)]
    else:  # and the cheapest sweep value of each approximate build at its (dim, precision)
        builds: dict[tuple, list[Candidate]] = {}
        for c in cands:
            if not _is_flat(c) and (c.dim, c.precision) == (me.dim, me.precision):
                builds.setdefault((c.entry, c.build_key), []).append(c)
        near += [_sweep_order(g)[0] for g in builds.values()]
    out = []
    for c in near:
        for s in walk.report.skips:
            if not s.opened and s.vi == vi and c.name in s.names and (vi, c.name) not in walk.done:
                out.append((s, c))
    return out


def _open(walk: _Walk, s: Skip, why: str) -> None:
    """The assumption failed here: measure everything it skipped (a whole variant: walk it)."""
    s.opened = why
    line = f"{s.assumption} failed: {why}; measured the {len(s.cands)} configuration(s) it had skipped ({s.why})"
    walk.report.checks.append(line)
    if s.assumption not in walk.report.failed:
        walk.report.failed.append(s.assumption)
    if s.variant:
        _walk_variant(walk, s.vi)
        return
    for c in s.cands:
        walk.step(walk.measure(s.vi, c), f"{s.assumption} failed: measured")


def _verify(walk: _Walk) -> None:
    """Check each assumption on the data until no check changes the pick (see the module docstring)."""
    rep = walk.report
    held: dict[str, int] = {}
    for _ in range(1000):  # each round measures something or ends; the grid is finite
        chosen = walk.pick()
        gains = _gains(walk)
        changed = False
        for s in list(rep.skips):
            if not s.opened:
                why = _passively_failed(walk, s, gains, chosen)
                if why:
                    _open(walk, s, why)
                    changed = True
        if changed:
            continue
        todo: dict[tuple[int, str], tuple[Skip, Candidate]] = {}
        for r in (chosen, rep.best):
            if r is not None:
                for s, c in _neighbours(walk, r):
                    todo.setdefault((s.vi, c.name), (s, c))
        for s, c in todo.values():
            if s.opened:
                continue
            x = walk.measure(s.vi, c)
            after = walk.pick()
            contradicts = (walk.passes(x) and s.assumption in ("ceiling", "coarser-loses")) or after is not chosen
            walk.step(x, f"check of {s.assumption}: " + ("failed" if contradicts else "held"))
            if contradicts:
                what = "is within the floor" if walk.passes(x) else f"changes the pick to {after.name if after else 'none'}"
                _open(walk, s, f"{x.name}, a neighbour of {chosen.name if chosen else 'the pick'}, {what}")
            else:
                held[s.assumption] = held.get(s.assumption, 0) + 1
            changed = True
        if not changed:
            break
    for a, n in held.items():
        rep.checks.insert(0, f"{a} held: {n} skipped neighbour(s) of the pick and the best measured, none changes the pick")
    standing = {s.assumption for s in rep.skips if not s.opened}
    gains = _gains(walk)
    for a in sorted(standing - set(held) - set(rep.failed)):
        gain, ev = gains.get(a, (1.0, ""))
        data = f"the largest gain against it measured is {gain - 1:.2%} ({ev}), too small to lift a skip to the floor" \
            if gain > 1 else "no measured configuration beats one it says it cannot"
        rep.checks.append(f"{a}: no skipped configuration neighbours the pick or the best; {data}")


def _baseline(walk: _Walk, pipe: Any) -> None:
    """The pipeline's current configuration, from the walk when it was measured, else measured now."""
    prepared = walk.prepared
    v, _, cands = prepared[0]
    for vv, _, cs in prepared:
        if vv.pipe is pipe:
            v, cands = vv, cs
    icfg, dim, prec = pipe.index_config, pipe.dim, pipe.config.embed.precision
    want = (icfg.backend, icfg.kind, repr(sorted(icfg.build.items())), dim, prec, repr(sorted(icfg.search.items())))
    d = v.describe()
    for s in walk.report.steps:
        r = s.result
        if (r.backend, r.kind, repr(sorted(r.build.items())), r.dim, r.precision, repr(sorted(r.search.items()))) == want \
                and r.embed == d["embed"] and r.chunking == d["chunking"] and not r.rerank:
            walk.report.baseline = r
            return
    vi = next(i for i, (vv, _, _) in enumerate(prepared) if vv is v)
    match = next((c for c in cands if not c.rerank and (c.index_config.backend, c.index_config.kind,
                  repr(sorted(c.index_config.build.items())), c.dim, c.precision, repr(sorted(c.search.items()))) == want), None)
    if match is None:
        if walk.replay is not None:
            return
        match = Candidate(f"pipeline {icfg.kind} d{dim} {prec}", 0, str(pipe.path), icfg, dim, prec, dict(icfg.search))
    walk.report.baseline = walk.step(walk.measure(vi, match), "the pipeline's current configuration")


def summary_lines(rep: TuneReport) -> list[str]:
    """The walk as text: each configuration tried and why it went on or stopped there."""
    q = rep.quality
    rs = rep.resampler
    how = (f"within the floor: the {rs.level:.0%} interval of quality / best (paired bootstrap over {rs.n} queries, "
           f"{rs.resamples} resamples) reaches it; cheaper only beyond the noise" if rs is not None else "point estimates")
    out = [f"best {q} measured: {rep.best_quality:.4f}; floor {rep.floor:g} x best = {rep.threshold():.4f} ({how})"]
    if rep.traffic.get("label"):
        out.append(f"priced at: {rep.traffic['label']}")
    out.extend(rep.notes)
    if rep.power is not None:
        out.append(rep.power.line())
        if rep.power.warning():
            out.append(f"warning: {rep.power.warning()}")
    out.append("")
    for i, s in enumerate(rep.steps, 1):
        r = s.result
        usd = "n/a" if r.usd_per_useful is None else f"${r.usd_per_useful:.3g}"
        ok = rep.passes(r)
        mark = "ok " if ok else "low"
        rel = rep.relative(r)
        ci = f" [{r.ci[q][0]:.4f}, {r.ci[q][1]:.4f}]" if q in r.ci else ""
        # "ok" is "above the floor" only when the whole interval is; else the judgments cannot tell it from the floor
        seen = "" if not ok or rel is None else ": above the floor" if rep.above(r) else ": not distinguishable from the floor"
        vs = f" ({rel.estimate:.1%} of best, {rel.lo:.1%} to {rel.hi:.1%}{seen})" if rel is not None else ""
        verdict = s.verdict
        if ok and not rep.above(r):
            verdict = verdict.replace("above the floor", "not distinguishable from the floor")
        out.append(f"{i:>3}. {mark} {r.name:<40} {q} {r.quality(q):.4f}{ci}{vs}  {usd}/useful  p95 {r.p95_ms:.2f} ms  "
                   f"{r.bytes_per_vector:,.0f} B/vec  -> {verdict}")
    out.extend(f"     skipped {p}" for p in rep.pruned)
    if rep.checks:
        out.append("assumptions checked on the data:")
        out.extend(f"  {line}" for line in rep.checks)
    return out
