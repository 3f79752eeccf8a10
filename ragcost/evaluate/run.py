"""Run an eval spec: embed once, build each index once, sweep its search parameters, measure, price.

The runner measures around the VectorIndex interface (ann-benchmarks style): per-query CPU and wall time
of a single-query search, one batch search (batch QPS), build seconds and
bytes. Retrieval is per document: chunks are fetched ``fetch_multiplier`` x deeper than the
documents wanted and collapsed to each document's best chunk (searching wider when too few
documents came back). Dollars and latency are the configuration priced as served
(``ragcost.evaluate.served``): the pipeline's whole query path at the traffic it will see
(``ragcost.evaluate.traffic``), priced by ragcost.cost.compute from the pipeline's book, plus amortised
storage by the one formula (``ragcost.cost.storage``: the index, the float32 copy unless it holds it, and
what the path keeps besides). `eval --ablate` prices the query embedding, the timed search and the stages.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from time import perf_counter, thread_time
from typing import Any, Callable, Optional

import numpy as np

from ragcost.cost.stats import percentiles
from ragcost.records import UsageRecord
from ragcost.errors import ConfigError, RagcostError
from ragcost.index.collapse import DocMap, collapse
from ragcost.evaluate.isolation import captured_stderr as _captured_stderr, one_thread as _one_thread
from ragcost.evaluate.spec import Candidate, LoadedSpec, expand
from ragcost.evaluate.vectors import DEFAULT_CACHE, CorpusVectors, QueryVectors, embed_corpus, embed_queries

Progress = Callable[[str, int, Optional[int]], None]  # (task, done, total)
WARM_UP = 5  # untimed searches before the latency loop
REPEATS = 3  # timed rounds over every query; a query's time is its median round (a shared machine is noisy)


@dataclass
class ConfigResult:
    """One configuration's measurements; ``status`` is ok, skipped or failed (with ``reason``)."""

    name: str
    status: str = "ok"
    reason: str = ""
    index_file: str = ""
    backend: str = ""
    kind: str = ""
    dim: int = 0
    precision: str = ""
    build: dict[str, Any] = field(default_factory=dict)
    search: dict[str, Any] = field(default_factory=dict)
    rerank: Optional[dict[str, Any]] = None
    embed: dict[str, Any] = field(default_factory=dict)  # the grid's embedders/chunking entry it ran on
    chunking: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0
    qps_single: float = 0.0
    qps_batch: float = 0.0
    build_seconds: float = 0.0
    bytes_per_vector: float = 0.0
    index_bytes: int = 0
    queries: int = 0
    useful: int = 0
    total_usd: float = 0.0
    usd_per_1k_queries: float = 0.0
    usd_per_useful: Optional[float] = None  # None: no useful document was retrieved
    pareto: bool = False
    recommended: bool = False
    warnings: list[str] = field(default_factory=list)
    stages: list[dict[str, Any]] = field(default_factory=list)  # per stage: usd, useful, usd_per_useful (storage last)
    calibration: Optional[dict[str, Any]] = None  # the useful-score threshold fitted on the qrels (evaluate.calibrate)
    expected: Optional[dict[str, Any]] = None  # the expected-useful judge fitted on the qrels, with held-out quality (evaluate.expected)
    ci: dict[str, list[float]] = field(default_factory=dict)  # figure -> [lo, hi], bootstrap over queries (evaluate.intervals)
    judged_at_k: Optional[float] = None  # share of the top-k documents (first k) that carry a judgment, 0 included
    path: str = "query embedding + search"  # what the $ and latency columns include (evaluate.served.describe)
    timing_noise: float = 0.0  # relative spread (max - min) / median of the repeated timing rounds' search CPU
    served_noise: float = 0.0  # the served path's timed passes: spread of their total $ over the median pass's
    # per query, in the run's query order: each metric, "useful" and "usd" (not in --json; the ledger keeps the quality's)
    per_query: dict[str, Any] = field(default_factory=dict, repr=False)
    top: list[list[str]] = field(default_factory=list, repr=False)  # per query its top max(k) documents (not in --json)

    def quality(self, name: str) -> float:
        return self.metrics.get(name, float("nan"))


@dataclass
class EvalRun:
    """A whole evaluation: what was compared, on what, and every configuration's result."""

    name: str
    spec_path: str
    pipeline: str
    dataset: str
    quality: str
    within_pct: float
    k: list[int]
    metric_names: list[str]
    queries: int
    documents: int
    chunks: int
    native_dim: int
    embedded_documents: int
    embed_seconds: float
    query_embed_ms: float  # mean per query
    price_book_version: str
    started_at: str
    store_url: str = ""  # the pipeline's store: the default ledger
    vectors_from_store: int = 0  # corpus chunk vectors taken from the pipeline's own store (same model), not embedded
    wall_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    results: list[ConfigResult] = field(default_factory=list)
    run_id: Optional[str] = None

    def ok(self) -> list[ConfigResult]:
        return [r for r in self.results if r.status == "ok"]

    query_ids: list[str] = field(default_factory=list, repr=False)  # the order of every result's per_query values
    intervals: dict[str, Any] = field(default_factory=dict)  # how the intervals were made (resamples, seed, level, note)
    ablation: list[dict[str, Any]] = field(default_factory=list)  # `eval --ablate`: per optional stage removed (evaluate.ablate)
    traffic: dict[str, Any] = field(default_factory=dict)  # the traffic the dollars are priced at (evaluate.traffic)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)  # the judgments used (not in --json)
    verdict: dict[str, Any] = field(default_factory=dict)  # switch/keep/inconclusive against the committed pipeline (evaluate.verdict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["usd_basis"] = USD_BASIS
        d.pop("query_ids", None)
        d.pop("qrels", None)
        for r in d["results"]:
            r.pop("per_query", None)
            r.pop("top", None)
        return d


# Eval's dollars are marginal by design (issue 24): its wall time builds indexes and repeats timing rounds for
# every configuration, so charging it as provisioned time would rank configurations by how long the experiment
# ran, not by what serving them costs. `ragcost query --queries` and `ragcost serve` record provisioned time.
USD_BASIS = ("marginal: busy CPU/GPU seconds and storage spread over the book's declared traffic; idle capacity is "
             "not included (ragcost report gives the fully loaded figure of query and serve runs)")


def _noop(task: str, done: int, total: Optional[int]) -> None:
    pass


def run_eval(ls: LoadedSpec, cache_dir: Path = DEFAULT_CACHE, progress: Progress = _noop,
             ray_address: Optional[str] = None, half: Optional[tuple[str, int]] = None,
             traffic: Optional[str] = None, per_month: Optional[tuple[int, str]] = None) -> EvalRun:
    """Everything `ragcost eval SPEC` measures, as data (nothing printed, nothing written but the caches).

    ``ray_address``: embed the corpus on that Ray cluster, whatever the pipeline's executor says.
    ``half``: (``fit`` or ``test``, seed): only that seeded half of the judged queries
    (:func:`ragcost.evaluate.expected.split_queries`), to fit a judge on one half and test it on the other.
    ``traffic``: one, serve or a batch size (:mod:`ragcost.evaluate.traffic`); None: the pipeline's.
    ``per_month``: (queries a month, where that figure came from) for the verdict's $ a month; None:
    the spec's ``queries_per_month``, else the price book's declared traffic.
    """
    from ragcost.evaluate.pareto import mark
    from ragcost.evaluate.grid import close_variants, merge_variant, variants
    from ragcost.runtime.pipeline import Pipeline

    t_start = perf_counter()
    pipe = Pipeline.load(ls.pipeline_path, judge=False)  # eval judges by the qrels, and calibrates the threshold
    if ray_address is not None:
        from ragcost.runtime.ray_executor import use_ray

        pipe.config = use_ray(pipe.config, ray_address)
    run: Optional[EvalRun] = None
    vs = []
    try:
        vs = variants(ls.spec, pipe)
        for v in vs:  # one corpus embedding per (embedder, chunking)
            vrun, ev, candidates = _prepare(ls, v.pipe, cache_dir, progress, half, traffic)
            _measure_all(vrun, ev, candidates, progress)
            run = merge_variant(run, vrun, v)
        assert run is not None
        from ragcost.evaluate.intervals import attach

        attach(run)
        mark(run.results, ls.spec.quality, ls.spec.within_pct)
        from ragcost.evaluate.power import attach_power

        attach_power(run)
        _verdict(run, ls, pipe, per_month)
        run.wall_seconds = perf_counter() - t_start
        return run
    finally:
        close_variants(vs, pipe)


def _verdict(run: EvalRun, ls: LoadedSpec, pipe: Any, per_month: Optional[tuple[int, str]]) -> None:
    """Switch, keep or inconclusive: the pick against the pipeline as committed (evaluate.verdict)."""
    from ragcost.evaluate.verdict import attach_verdict
    from ragcost.runtime.judge import pipeline_fingerprint

    if per_month is None:
        book = pipe.price_book
        per_month = ((ls.spec.queries_per_month, f"queries_per_month of {ls.path}") if ls.spec.queries_per_month else
                     (book.queries_per_month, f"declared in price book {book.version}"))
    attach_verdict(run, pipeline_fingerprint(pipe), per_month[0], per_month[1], ls.spec.material_usd_per_month)


def _prepare(ls: LoadedSpec, pipe: Any, cache_dir: Path, progress: Progress,
             half: Optional[tuple[str, int]] = None,
             traffic: Optional[str] = None) -> tuple[EvalRun, "_Evaluator", list[Candidate]]:
    """Embed (or read from cache) the corpus and the queries; expand the grid; the run's header."""
    from ragcost.evaluate.datasets import check_files, load_dataset

    from ragcost.evaluate.traffic import resolve

    spec, book = ls.spec, pipe.price_book
    shape = resolve(pipe, traffic)  # a bad --traffic is refused before any model loads
    check_files(ls.dataset_path)
    progress("loading model", 0, None)
    pipe.embedder.warm_up()
    corpus = embed_corpus(pipe, ls.dataset_path, cache_dir, progress=lambda d, t: progress("embedding corpus", d, t))
    ds = load_dataset(ls.dataset_path, corpus.doc_ids)
    queries = dict(list(ds.queries.items())[: spec.max_queries] if spec.max_queries else ds.queries)
    if half is not None:
        from ragcost.evaluate.expected import split_queries

        keep = set(split_queries(list(queries), half[1])[0 if half[0] == "fit" else 1])
        queries = {q: t for q, t in queries.items() if q in keep}
    qrels = {q: ds.qrels[q] for q in queries}
    if spec.relevance == "binary":
        from ragcost.evaluate.metrics import binary

        qrels = binary(qrels)
    progress("embedding queries", 0, len(queries))
    qv = embed_queries(pipe, queries, ls.dataset_path, cache_dir, batch=shape.batch)
    progress("embedding queries", len(queries), len(queries))
    native = int(corpus.vectors.shape[1])
    candidates, skipped = expand(ls, native, min(pipe.dim, native))
    run = EvalRun(
        name=ls.name, spec_path=str(ls.path), pipeline=pipe.config.name, dataset=ds.name, quality=spec.quality,
        within_pct=spec.within_pct, k=list(spec.k), metric_names=spec.metric_names(), queries=len(queries),
        documents=len(corpus.doc_ids), chunks=len(corpus.labels), native_dim=native,
        embedded_documents=corpus.summary.embedded_documents, embed_seconds=corpus.summary.embed_seconds,
        vectors_from_store=corpus.summary.vectors_from_store,
        query_embed_ms=float(qv.seconds.mean() * 1000) if len(qv.seconds) else 0.0,
        price_book_version=str(book.version), store_url=pipe.config.store_url,
        started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        warnings=ds.problems.lines() + [f"skipped input: {s}" for s in corpus.summary.report.skipped[:3]]
        + ([] if spec.served_rounds > 1 else ["served_rounds 1: each configuration's served path was timed once, so its "
                                              "noise is not measured (tune's dominance bound takes it as 0)"]),
        query_ids=list(queries), traffic=shape.to_dict(), qrels=qrels,
    )
    run.results.extend(ConfigResult(s.name, status="skipped", reason=s.reason) for s in skipped)
    ev = _Evaluator(ls, pipe, book, corpus, qv, queries, qrels)
    ev.traffic_batch = shape.batch
    ev.half = f"{half[0]} half, seed {half[1]}" if half else None
    return run, ev, candidates


def _measure_all(run: EvalRun, ev: "_Evaluator", candidates: list[Candidate], progress: Progress) -> None:
    """Build each distinct index once and measure every candidate searched on it; failures are data."""
    from ragcost.evaluate.metrics import exact_kth

    exact: dict[int, dict[int, np.ndarray]] = {}
    groups: dict[tuple, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.build_key, []).append(c)
    done = 0
    progress("configurations", 0, len(candidates))
    for group in groups.values():
        first = group[0]
        if first.dim not in exact:
            exact[first.dim] = exact_kth(ev.queries_at(first.dim), ev.vectors_at(first.dim), ev.corpus.doc_of, ev.spec.k)
        try:
            index, build_s = ev.build(first)
        except Exception as e:  # the other configurations still run
            run.results.extend(_failed(c, f"build failed: {_msg(e)}") for c in group)
            done += len(group)
            progress("configurations", done, len(candidates))
            continue
        for c in group:
            progress(f"searching {c.name}", done, len(candidates))
            try:
                run.results.append(ev.measure(c, index, build_s, exact[c.dim]))
            except ConfigError:
                raise
            except Exception as e:
                run.results.append(_failed(c, f"search failed: {_msg(e)}"))
            done += 1
            progress("configurations", done, len(candidates))
        del index


def _msg(e: Exception) -> str:
    return str(e) if isinstance(e, RagcostError) else f"{type(e).__name__}: {e}"


def _failed(c: Candidate, reason: str) -> ConfigResult:
    r = _describe(ConfigResult(c.name), c)
    r.status, r.reason = "failed", reason
    return r


def _describe(r: ConfigResult, c: Candidate) -> ConfigResult:
    r.index_file, r.backend, r.kind = c.index_file, c.index_config.backend, c.index_config.kind
    r.dim, r.precision, r.build, r.search, r.rerank = c.dim, c.precision, dict(c.index_config.build), dict(c.search), c.rerank
    return r


def evaluator(ls: LoadedSpec, pipe: Any, corpus: CorpusVectors, qv: QueryVectors, queries: dict[str, str]) -> "_Evaluator":
    """An evaluator over ``queries`` with no judgments (`ragcost judgments pool`: rankings only)."""
    return _Evaluator(ls, pipe, pipe.price_book, corpus, qv, queries, {q: {} for q in queries})


def rank_all(ev: "_Evaluator", c: Candidate, index: Any, k: int) -> dict[str, list[str]]:
    """Every query's top ``k`` documents under configuration ``c`` (its re-rank stage included), untimed."""
    stage = ev.ls.stages.get(c.entry) if c.rerank else None
    want = (c.candidates or 4 * k) if stage else k
    Q = ev.queries_at(c.dim)
    got = [ev._retrieve(index, Q[i:i + 1], want, c.search or None)[0] for i in range(len(Q))]
    if stage:
        ranked, _, _ = ev._stage_runner().run(stage, c, index, got)
    else:
        ranked = {q: [ev.corpus.doc_ids[d] for d in docs] for q, (docs, _, _) in zip(ev.qids, got)}
    return {q: list(ranked.get(q, []))[:k] for q in ev.qids}


class _Evaluator:
    """Builds and measures candidates over one corpus and one set of queries."""

    def __init__(self, ls: LoadedSpec, pipe: Any, book: Any, corpus: CorpusVectors, qv: QueryVectors,
                 queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> None:
        self.ls, self.spec, self.pipe, self.book = ls, ls.spec, pipe, book
        self.corpus, self.qv, self.queries, self.qrels = corpus, qv, queries, qrels
        self.qids = list(queries)
        self._vecs: dict[int, np.ndarray] = {}
        self._qvecs: dict[int, np.ndarray] = {}
        self._stages: Optional[Any] = None
        self.half: Optional[str] = None  # "fit half, seed 0" when only a seeded half of the queries is evaluated
        # doc -> its chunk rows, for exact scores of returned documents
        perm = np.argsort(corpus.doc_of, kind="stable")
        bounds = np.flatnonzero(np.r_[True, np.diff(corpus.doc_of[perm]) != 0, True])
        self._doc_rows = [perm[bounds[i]:bounds[i + 1]] for i in range(len(bounds) - 1)]
        self._docmap = DocMap.from_ordinals(corpus.labels, corpus.doc_of, corpus.doc_ids)
        # `eval --ablate`: every variant of the pipeline is priced on one timed retrieval, so its
        # Δ$ is the removed stage's alone, not the search's run-to-run noise
        self.reuse_retrieval = False
        self.retrievals: dict[tuple, tuple] = {}
        self.traffic_batch = 1  # queries per call when served (evaluate.traffic)
        self._store_bytes: Optional[int] = None
        self._sentence_bytes: Optional[int] = None

    def vectors_at(self, dim: int) -> np.ndarray:
        from ragcost.embed.reduce import truncate

        if dim not in self._vecs:
            self._vecs = {dim: truncate(self.corpus.vectors, dim)}  # one dim at a time: groups are built in order
        return self._vecs[dim]

    def queries_at(self, dim: int) -> np.ndarray:
        from ragcost.embed.reduce import truncate

        if dim not in self._qvecs:
            self._qvecs[dim] = truncate(self.qv.vectors, dim)
        return self._qvecs[dim]

    def build(self, c: Candidate) -> tuple[Any, float]:
        from ragcost.index.artifact import timed_build

        with _captured_stderr() as notes:  # faiss's C++ training warnings would tear through the progress bars
            index, seconds = timed_build(c.index_config, self.vectors_at(c.dim), self.corpus.labels, c.precision)
        seen = set()
        for line in notes():  # only faiss's own lines: a live progress display may have drawn here too
            key = re.sub(r"\d+", "N", line)
            if line.startswith("WARNING") and key not in seen:
                seen.add(key)
                index.warnings.append(f"faiss: {line.strip()}")
        return index, seconds

    # ---- one configuration ---------------------------------------------------------------

    def _collapse(self, scores: np.ndarray, labels: np.ndarray, want: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(doc positions, their best chunk's label, score), best first, at most ``want`` documents."""
        lb, sc, dd, counts = collapse(scores[None, :], labels[None, :], self._docmap, np.array([want]), want)
        n = int(counts[0])
        return dd[0, :n].astype(np.int64), lb[0, :n], sc[0, :n]

    def _retrieve(self, index: Any, q: np.ndarray, want: int, params: Optional[dict]) -> tuple[tuple, float]:
        """One query, timed: fetch chunks, collapse, fetch wider while too few documents came back."""
        n = len(self.corpus.labels)
        fetch = min(n, want * self.spec.fetch_multiplier)
        t0 = perf_counter()
        while True:
            scores, labels = index.search(q, fetch, params=params)
            got = self._collapse(scores[0], labels[0], want)
            if len(got[0]) >= want or fetch >= n:
                break
            fetch = min(n, fetch * 4)
        seconds = perf_counter() - t0
        return got, seconds

    def measure(self, c: Candidate, index: Any, build_s: float, kth: dict[int, np.ndarray],
                stages: Optional[list] = None, want: Optional[int] = None) -> ConfigResult:
        """One configuration: timed single-query retrieval, a batch search, ANN recall, quality, dollars.

        ``stages``/``want``: run these (class, params) after retrieving ``want`` documents instead of the
        grid entry's rerank (`eval --ablate`: the pipeline's own stages, one removed at a time)."""
        spec = self.spec
        r = _describe(ConfigResult(c.name), c)
        r.warnings = list(index.warnings)
        stage = (stages or None) if stages is not None else self.ls.stages.get(c.entry)
        if want is None:
            want = (c.candidates or 4 * max(spec.k)) if stage else max(spec.k)
        key = (id(index), c.name, want)
        if key not in self.retrievals:
            timed = self._timed_retrieval(c, index, want)
            if not self.reuse_retrieval:
                return self._measured(r, c, index, build_s, kth, stage, timed)
            self.retrievals[key] = timed
        return self._measured(r, c, index, build_s, kth, stage, self.retrievals[key])

    def _measured(self, r: ConfigResult, c: Candidate, index: Any, build_s: float, kth: dict[int, np.ndarray],
                  stage: Any, timed: tuple) -> ConfigResult:
        from ragcost.evaluate.metrics import evaluate

        spec, corpus = self.spec, self.corpus
        got, lat, cpu, batch_s, r.timing_noise = timed
        self._ann_recall(r, c, got, kth)
        extra_records: list[UsageRecord] = []
        search_lat = lat
        stage_s = np.zeros(len(self.qids))
        if stage:
            ranked, stage_s, extra_records = self._stage_runner().run(stage, c, index, got)
            lat = lat + stage_s  # the query's latency includes its share of the stage's batch call
        else:
            ranked = {q: [corpus.doc_ids[d] for d in docs] for q, (docs, _, _) in zip(self.qids, got)}
        means, per = evaluate({q: d[:max(spec.k)] for q, d in ranked.items()}, self.qrels, spec.metric_names())
        from ragcost.evaluate.metrics import judged_at

        r.top = [list(ranked.get(q, []))[:max(spec.k)] for q in self.qids]
        r.judged_at_k = judged_at(dict(zip(self.qids, r.top)), self.qrels, spec.k[0])
        r.metrics = {**means, **r.metrics}
        r.per_query = {m: np.array([v.get(q, 0.0) for q in self.qids]) for m, v in per.items()}
        served = None
        if not self.reuse_retrieval:  # `eval --ablate` prices its variants on one timed retrieval (evaluate.ablate)
            from ragcost.evaluate.served import measure as measure_served

            served = measure_served(self, c, index, self.ls.stages.get(c.entry) if c.rerank else None, self.traffic_batch)
            r.warnings += [f"not priced: {x}" for x in served.skipped]
            r.served_noise = served.noise
            lat = served.seconds  # the whole path a served query waits for, its embedding included
        self._price(r, c, index, ranked, search_lat, cpu, stage_s, extra_records, served)
        final_scores = self._stage_runner().last_scores if stage else self._scores_of(got)
        r.calibration = self._calibrate(ranked, final_scores).to_dict()
        self._fit_expected(r, c, ranked, final_scores)
        r.p50_ms, r.p95_ms, r.p99_ms = percentiles(lat * 1000)
        nq = len(self.qids)
        r.qps_single = nq / float(lat.sum()) if lat.sum() > 0 else 0.0
        r.qps_batch = nq / batch_s if batch_s > 0 else 0.0
        r.build_seconds = float(build_s)
        return r

    def _timed_retrieval(self, c: Candidate, index: Any, want: int) -> tuple[list, np.ndarray, np.ndarray, float, float]:
        """Per-query results, wall and CPU seconds of single-query retrieval (one core; each query's median of
        REPEATS rounds), one batch search's seconds, and the rounds' relative spread of total CPU seconds."""
        params = c.search or None
        Q = self.queries_at(c.dim)
        got: list = []
        wall, cpu = np.zeros((REPEATS, len(Q))), np.zeros((REPEATS, len(Q)))
        for i in range(min(len(Q), WARM_UP)):  # first calls page in code and memory; not timed
            self._retrieve(index, Q[i:i + 1], want, params)
        with _one_thread():  # one request, one core: how a serving process answers a single query
            for rnd in range(REPEATS):  # whole rounds, so a burst of load on the machine hits one round, not one query
                for i in range(len(Q)):
                    c0 = thread_time()
                    g, wall[rnd, i] = self._retrieve(index, Q[i:i + 1], want, params)
                    cpu[rnd, i] = thread_time() - c0
                    if rnd == 0:
                        got.append(g)
        t0 = perf_counter()
        index.search(Q, min(len(self.corpus.labels), want * self.spec.fetch_multiplier), params=params)
        rounds = cpu.sum(axis=1)
        noise = float((rounds.max() - rounds.min()) / np.median(rounds)) if np.median(rounds) > 0 else 0.0
        return got, np.median(wall, axis=0), np.median(cpu, axis=0), perf_counter() - t0, noise

    def _ann_recall(self, r: ConfigResult, c: Candidate, got: list, kth: dict[int, np.ndarray]) -> None:
        """ANN recall of the retrieval itself, against exact search over the same float32 vectors."""
        from ragcost.evaluate.metrics import ann_recall

        Q, V = self.queries_at(c.dim), self.vectors_at(c.dim)
        for k in self.spec.k:
            found = [self._exact_doc_scores(Q[i], docs[:k], V) for i, (docs, _, _) in enumerate(got)]
            r.metrics[f"ann_recall@{k}"] = ann_recall(found, kth[k], k, len(self.corpus.doc_ids))

    def _price(self, r: ConfigResult, c: Candidate, index: Any, ranked: dict, search_lat: np.ndarray, search_cpu: np.ndarray,
               stage_s: np.ndarray, extra_records: list[UsageRecord], served: Any = None) -> None:
        """Useful documents by the qrels and every dollar: query embedding, then the served path (the pipeline's
        stages at the traffic's batch size, evaluate.served) or, without one, the timed search and extra stages;
        storage."""
        from ragcost.cost.compute import cost_of, storage_cost_per_query
        from ragcost.cost.storage import holds_float32, storage_bytes
        from ragcost.cost.useful import QrelsJudge, cost_per_useful

        judge = QrelsJudge(self.qrels)
        k0 = self.spec.k[0]
        useful = np.array([judge.count([{"doc_id": d} for d in ranked[q][:k0]], query_id=q) for q in self.qids], float)
        r.useful = int(useful.sum())
        nq = len(self.qids)
        emb_res = self.pipe.config.embed.resource or self.pipe.config.resource
        embed = UsageRecord(stage="embed", resource=emb_res, wall_seconds=float(self.qv.seconds[:nq].sum()), items=nq,
                            cpu_seconds=self.qv.cpu_seconds(nq),
                            input_tokens=int(self.qv.tokens[:nq].sum()), cached_input_tokens=0)
        from ragcost.evaluate.intervals import SEARCH_ROW

        if served is not None:
            records = [embed, *served.records]  # the embed priced by the query set's one measurement (evaluate.served)
        else:
            records = [embed, UsageRecord(stage=SEARCH_ROW, resource=self.pipe.config.resource, wall_seconds=float(search_lat.sum()),
                                          items=nq, cpu_seconds=float(search_cpu.sum())), *extra_records]
        r.index_bytes = int(index.nbytes())
        n = len(self.corpus.labels)
        held = holds_float32(c.index_config.backend, c.index_config.kind, c.precision)
        extra = {} if served is None else {"bm25_bytes": served.extra_storage_bytes, "store_bytes": self.store_bytes()}
        per_query_storage = storage_cost_per_query(*storage_bytes(r.index_bytes, n, c.dim, holds_vectors=held, **extra), self.book)
        r.total_usd = sum(cost_of(x, self.book) for x in records) + per_query_storage * nq
        r.queries = nq
        r.usd_per_1k_queries = r.total_usd / nq * 1000 if nq else 0.0
        r.usd_per_useful = cost_per_useful(r.total_usd, r.useful)
        r.bytes_per_vector = r.index_bytes / n if n else 0.0
        r.stages = stage_costs(records, self.book, r.total_usd - sum(cost_of(x, self.book) for x in records), r.useful,
                               search=(served.search_stage if served is not None else None) or SEARCH_ROW)
        # each stage's dollars spread over the queries by their share of its measured work
        embed_work = self.qv.cpu[:nq] if self.qv.cpu is not None else self.qv.seconds[:nq]
        shares = {"embed": embed_work, "retrieve": search_cpu}
        per_q = np.full(nq, per_query_storage)
        if served is not None:  # the served path's dollars are already each query's own part of its calls
            from ragcost.evaluate.served import describe

            r.path = describe(served)
            per_q += served.usd
            records = [embed]
        for x in records:
            w = np.asarray(shares.get(x.stage, stage_s), float)
            per_q += cost_of(x, self.book) * (w / w.sum() if w.sum() > 0 else np.full(nq, 1.0 / nq))
        r.per_query["useful"], r.per_query["usd"] = useful, per_q

    def store_bytes(self) -> int:
        """The eval cache store's tables (the served path reads chunk texts from them), measured once."""
        if self._store_bytes is None:
            self._store_bytes = self.corpus.pipeline.store_bytes()
        return self._store_bytes

    def sentence_bytes(self) -> int:
        """What the grounded check's index-time sentence vectors of this corpus take (measured once, not embedded)."""
        if self._sentence_bytes is None:
            from ragcost.guards.sentence_vectors import expected_bytes

            labels, texts = self.corpus.pipeline.store().chunk_column("text")
            self._sentence_bytes = expected_bytes(np.asarray(labels, np.int64), list(texts), int(self.corpus.vectors.shape[1]))
        return self._sentence_bytes

    def _scores_of(self, got: list) -> dict[str, dict[str, float]]:
        """Per query, each retrieved document's score (its best chunk's), as the retrieve stage gives it."""
        ids = self.corpus.doc_ids
        return {q: {ids[d]: float(sc) for d, sc in zip(docs, scores)} for q, (docs, _, scores) in zip(self.qids, got)}

    def _calibrate(self, ranked: dict, scores: dict[str, dict[str, float]]) -> Any:
        """The useful threshold from (final score, relevant?) of the top-k documents of every query."""
        from ragcost.evaluate.calibrate import calibrate

        k0 = self.spec.k[0]
        pairs = [(scores[q][d], self.qrels.get(q, {}).get(d, 0) >= 1)
                 for q in self.qids for d in ranked[q][:k0] if d in scores.get(q, {})]
        u = self.pipe.config.useful
        return calibrate(pairs, u.precision, u.objective, u.min_recall)

    def _fit_expected(self, r: ConfigResult, c: Candidate, ranked: dict, scores: dict[str, dict[str, float]]) -> None:
        """P(relevant) of a final document from its score, rank and gap, fit on the qrels; held-out quality."""
        from ragcost.cost.calibration import fingerprint_of
        from ragcost.evaluate.expected import fit_expected, judged_queries, qrels_hash
        from ragcost.runtime.judge import scoring_of

        judged = judged_queries(self.qids, ranked, scores, self.qrels, self.spec.k[0])
        r.expected = fit_expected(judged)
        cfg = self.pipe.config
        stage = self.ls.stages.get(c.entry) if c.rerank else None
        scoring = [scoring_of(stage[1])] if stage else []
        r.expected["fingerprint"] = fingerprint_of(
            cfg.embed.model, self.pipe.embedder.fingerprint(), c.dim, c.precision, self.pipe._chunking_made_by(),
            c.index_config.backend, c.index_config.kind, c.index_config.build, c.search, scoring, self.spec.k[0])
        r.expected["dataset"] = {"name": self.ls.dataset_path.name, "queries": len(self.qids), "qrels": qrels_hash(self.qrels),
                                 "half": self.half}
        r.judged = judged  # type: ignore[attr-defined]  # for --write and tests; not a field: not serialised

    def _stage_runner(self) -> Any:
        from ragcost.evaluate.stages import StageRunner

        if self._stages is None:
            self._stages = StageRunner(self.pipe, self.corpus, self.queries, self.spec.k[0], self.vectors_at, self.queries_at)
        return self._stages

    def _exact_doc_scores(self, q: np.ndarray, docs: np.ndarray, V: np.ndarray) -> np.ndarray:
        return np.array([float((V[self._doc_rows[d]] @ q).max()) for d in docs], dtype=np.float32)

def stage_costs(records: list[UsageRecord], book: Any, storage_usd: float, useful: int,
                search: Optional[str] = None) -> list[dict[str, Any]]:
    """Per stage (first-seen order), then storage: its dollars and its dollars per useful document. The row of
    ``search`` (the stage that fetched the hits, whatever the pipeline named it) says ``search: true``: the
    timing rounds' noise widens its dollars (:mod:`ragcost.evaluate.intervals`).

    Every eval query runs every stage, so each stage's useful documents are all of them.
    """
    from ragcost.cost.compute import STORAGE_STAGE, cost_of
    from ragcost.cost.useful import cost_per_useful

    usd: dict[str, float] = {}
    for x in records:
        usd[x.stage] = usd.get(x.stage, 0.0) + cost_of(x, book)
    usd[STORAGE_STAGE] = storage_usd
    return [{"stage": name, "usd": v, "useful": useful, "usd_per_useful": cost_per_useful(v, useful),
             **({"search": True} if name == search else {})} for name, v in usd.items()]


def results_json(run: EvalRun) -> str:
    """The run as JSON (every figure with its ``ci``; NaN as null, so any JSON reader takes it)."""
    from ragcost.cost.fmt import json_safe

    return json.dumps(json_safe(run.to_dict()), indent=2, default=str, allow_nan=False)
