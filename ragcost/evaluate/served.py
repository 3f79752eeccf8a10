"""Price a configuration as it will be served: the pipeline's whole query path, at the traffic it will see.

eval judges quality on its own ranking (:mod:`ragcost.evaluate.run`); what serving a configuration costs is
the path each query takes through the pipeline. So the dollars and the latency of a configuration are:

- the pipeline's stages -- the query's embedding, retrieval on the index under test with its store read,
  re-ranking, guards, generation -- run in order by the same runner as `ragcost query`, in calls of the
  traffic's batch size (:mod:`ragcost.evaluate.traffic`), on the eval cache's store, each batch call split
  over its queries by their work where the stage says it (an embed's tokens), and
- the CPU spent between those stage calls (the ``overhead`` row `ragcost query` charges too: torch's
  threads spinning after an embed are in it), and
- the ledger write of each batch's queries (their rows in one transaction, as `ragcost query` and
  `ragcost serve`'s group commit write them), on a scratch DuckDB ledger in a temporary folder, inside the
  same overhead claim: a served query pays its own ledger row. Before, eval priced no ledger write; with
  the ledger on, query time came to 1.49x eval's $/useful (issue 41). One at a time, each query is its own
  commit (5.8 ms of CPU on DuckDB here); in batches of 64, 1.0 ms a query.

The embedding runs inside the path, not apart: a stage after an embed call costs 10-15% more CPU than the
same stage run alone (caches, threads waking; the quickstart's retrieve: 6.2-6.7 ms after an embed, 5.4-5.7
alone), and torch's threads spin into the overhead row; with the path run without it eval priced 0.82x of
`ragcost query` (``bench.eval_served``). The embed call's own dollars, though, are the query set's one
measurement at the traffic's batch size (:func:`ragcost.evaluate.vectors.query_cpu`), shared by every
configuration: re-timed per configuration, its noise would make configurations differ in dollars by the
embedding, which none of them changes (and tune's lower bound, the embedding plus the index's storage,
stays below every configuration's price). Its wall seconds are in each query's latency.

A grid entry's own ``rerank`` takes the place of the pipeline's re-rank stages; a pipeline with no retrieve
stage is priced with a plain one (``k`` = the spec's largest; an entry's ``candidates`` when it re-ranks). A stage eval cannot run here (a cache or a
route, whose answers depend on traffic eval does not replay; a generator whose server does not answer) is
left out and named in the run's warnings, and the columns say what they include. Storage is the one formula
`ragcost query` charges (:func:`ragcost.cost.storage.storage_bytes`): the index, its float32 copy, a hybrid
stage's BM25 folder, the grounded check's index-time sentence vectors (their size, from the chunks' sentences)
and the store's tables. One untimed pass warms
every stage but the embedding (BM25 built, sentence vectors embedded once, as a served process has them; the
queries carry eval's cached vectors), then the spec's ``served_rounds`` timed passes (3 by default): the dollars are the pass of median total,
each query's latency its median over the passes, and the passes' spread of total $ is ``Served.noise``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ragcost.records import QueryState, UsageRecord

EMBED = "embed"
@dataclass
class Served:
    """One configuration's query path after the embedding, per query in the run's order."""

    usd: np.ndarray  # each query's dollars: its part of every stage call after the embed it used, and of the overhead
    seconds: np.ndarray  # each query's wall seconds in the calls that served it, the embed's included (median over the rounds)
    records: list[UsageRecord]  # the median round's records but the embed's (the overhead row included)
    stages: list[str]  # the stages priced, in order
    skipped: list[str] = field(default_factory=list)  # "stage: why" for each one left out
    extra_storage_bytes: int = 0  # what the served stages keep besides the index: BM25 folders, sentence vectors
    noise: float = 0.0  # the timed passes' spread of total $: (max - min) / median
    search_stage: Optional[str] = None  # the name of the stage that fetched the hits (a pipeline may rename retrieve)


def stage_list(ev: Any, c: Any, extra: Any) -> tuple[list[tuple[type, Any]], list[str]]:
    """The (class, params) the served path runs after the embedding, and the stages left out (with why)."""
    import ragcost.stages  # noqa: F401  (registers the built-in stages)
    from ragcost.stages.base import stage_registry

    specs = list(ev.pipe.loaded.stage_specs)
    skipped = [f"{cls.type}: {cls.eval_skips}" for cls, _ in specs if cls.eval_skips]
    specs = [(cls, p) for cls, p in specs if not cls.eval_skips]
    if extra:  # the grid entry's re-rank in place of the pipeline's
        at = next((i for i, (cls, _) in enumerate(specs) if cls.reorders_hits), None)
        specs = [(cls, p) for cls, p in specs if not cls.reorders_hits]
        if at is None:
            at = next((i + 1 for i, (cls, _) in enumerate(specs) if cls.fetches_hits), len(specs))
        specs.insert(at, extra)
    if not any(cls.fetches_hits for cls, _ in specs):
        cls = stage_registry.get("retrieve")
        specs.insert(0, (cls, cls.Params(k=max(ev.spec.k))))
    if extra and c.candidates:  # the entry re-ranks this many retrieved documents: served, the retrieve stage fetches them
        specs = [(cls, p.model_copy(update={"k": c.candidates}) if cls.fetches_hits else p) for cls, p in specs]
    return specs, skipped


def measure(ev: Any, c: Any, index: Any, extra: Any, batch: int) -> Served:
    """The served path of candidate ``c`` on ``index`` over ``ev``'s queries, in calls of ``batch`` queries."""
    from ragcost.evaluate.stages import StageRunner
    from ragcost.runtime.cpu import METER
    from ragcost.runtime.runner import Runner, overhead_call
    from ragcost.guards.grounded import wants_index_sentences
    from ragcost.stages.guard import GuardStage
    from ragcost.stages.rerank.hybrid import Hybrid
    from ragcost.stages.embed import EmbedQueries
    from ragcost.stages.rerank.stage import Rerank

    specs, skipped = stage_list(ev, c, extra)
    sr: StageRunner = ev._stage_runner()
    ctx = sr._context(c, index)
    built: list = [EmbedQueries(EmbedQueries.Params(resource=ev.pipe.config.embed.resource), ctx)]
    for cls, params in specs:
        st = cls(params, ctx)
        try:
            st.warm_up()
        except Exception as e:  # a generator whose server is down: priced without it, and said so
            skipped.append(f"{getattr(st, 'name', cls.type)}: not measured ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
            continue
        built.append(st)
    runner = Runner(built, ev.book)
    scratch = _ScratchLedger(ev.book)
    k = next((cls.final_k(p) for cls, p in specs if cls.fetches_hits), max(ev.spec.k))
    resource = ev.pipe.config.resource
    METER.own_thread()  # the thread that runs the queries: its CPU between calls is the overhead row's

    def states() -> list[QueryState]:
        return [QueryState(text=text, id=q, k=k) for q, text in ev.queries.items()]

    def embedded() -> list[QueryState]:
        """The queries with the vectors eval embedded them to (the warm pass needs no embedding of its own)."""
        Q, full = ev.queries_at(c.dim), ev.queries_at(ev.corpus.vectors.shape[1])
        truncated = Q.shape[1] < full.shape[1]
        ss = states()
        for i, s in enumerate(ss):
            s.vector, s.full_vector = Q[i], (full[i] if truncated else None)
        return ss

    warm_runner = Runner(built[1:], ev.book)

    def one_pass(warm: bool = False) -> tuple[np.ndarray, np.ndarray, list[UsageRecord]]:
        ss = embedded() if warm else states()
        pos = {id(s): i for i, s in enumerate(ss)}
        usd, secs, records = np.zeros(len(ss)), np.zeros(len(ss)), []
        METER.claim_overhead()  # what ran before this pass is no query's
        for lo in range(0, len(ss), batch):
            part = ss[lo:lo + batch]
            res = (warm_runner if warm else runner).run(part)
            if not warm or lo == 0:  # the warm pass writes once: the ledger's tables and statements, warmed
                scratch.write(res)  # its CPU is in this batch's overhead claim, as a served batch's is
            over = overhead_call(part, resource, ev.book)
            if over is not None:
                res.calls.append(over)
            for call in res.calls:
                mine = [call.query] if call.query is not None else call.served
                priced = call.record.stage != EMBED  # the embedding's dollars: the one shared measurement (above)
                if priced:
                    records.append(call.record)
                for s in mine:
                    if priced:
                        usd[pos[id(s)]] += call.cost_usd / (1 if call.query is not None else len(mine))
                    if call.record.calls:
                        secs[pos[id(s)]] += call.record.wall_seconds
        # one record per busy period for the latency and the stage table: split records each carry the period's wall
        return usd, secs, records

    try:
        # warm: BM25 built, the grounded check's sentence vectors, the ledger's tables. Without the embedding (the
        # queries carry eval's vectors): the embed's dollars are the query set's one measurement and its latency
        # the median of the timed passes, so embedding here was a pass of embedding CPU that priced nothing (issue 47:
        # a 17-configuration Cranfield grid 77.6 s -> 69.6 s)
        built[0].warm_up()  # the model loaded here, not inside the first timed pass
        one_pass(warm=True)
        rounds = [one_pass() for _ in range(ev.spec.served_rounds)]
    finally:
        scratch.close()
    pick = sorted(range(len(rounds)), key=lambda i: rounds[i][0].sum())[len(rounds) // 2]
    usd, _, records = rounds[pick]
    totals = [float(r[0].sum()) for r in rounds]
    noise = (max(totals) - min(totals)) / totals[pick] if totals[pick] > 0 else 0.0
    seconds = np.median(np.vstack([r[1] for r in rounds]), axis=0)
    kept = sum(st.backend.index_bytes() for st in built if isinstance(st, Rerank) and isinstance(st.backend, Hybrid))
    if any(isinstance(st, GuardStage) and wants_index_sentences(st.params.checks) for st in built):
        kept += ev.sentence_bytes()  # the grounded check's index-time sentence vectors, as `ragcost index` keeps them
    search = next((st.name for st in built if st.fetches_hits), None)
    return Served(usd, seconds, records, [getattr(st, "name", st.type) for st in built], skipped, int(kept), noise, search)


class _ScratchLedger:
    """A DuckDB ledger in a temporary folder that receives each batch's query rows as `ragcost query` writes them."""

    def __init__(self, book: Any) -> None:
        import tempfile

        from ragcost.cost.ledger import Ledger

        self._dir = tempfile.TemporaryDirectory(prefix="ragcost-eval-ledger-")
        self.book = book
        self.ledger = Ledger(f"duckdb:///{self._dir.name}/ledger.duckdb")
        self.run_id = self.ledger.start_run("query", "eval-scratch", str(book.version))
        self.life = self.ledger.start_lifetime("batch", "eval-scratch", "cpu", self.run_id)

    def write(self, res: Any) -> None:
        from ragcost.cost.compute import stage_row, storage_row

        items = []
        for s in res.states:
            rows = [stage_row(c.record, self.book, c.call_id) for c in res.calls if c.serves(s)]
            rows.append(storage_row(0, 0, self.book))
            items.append(({"text": s.text, "ok": s.ok, "useful": 0, "retrieved": len(s.hits), "error": s.error,
                           "outcome": s.outcome, "outcome_stage": s.outcome_stage}, rows))
        self.ledger.record_queries(self.run_id, items)  # the batch in one transaction, as `ragcost query` writes it
        self.ledger.heartbeat(self.life)  # and its lifetime's heartbeat after each batch

    def close(self) -> None:
        try:
            self.ledger.close()
        finally:
            self._dir.cleanup()


def describe(served: Optional[Served]) -> str:
    """What a priced column includes, for the terminal and --json."""
    if served is None:
        return "query embedding + search"
    return " + ".join([*served.stages, "overhead (ledger write included)"])
