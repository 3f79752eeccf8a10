"""The Python API: ``ragcost.open(path)`` gives a session that answers queries, writes the ledger
and streams answers. The CLI and the HTTP server (``ragcost.serve``) are thin layers over it.

    with ragcost.open("pipelines/quickstart.yaml") as p:
        r = p.query("how does with call __exit__?", filter={"year": 2024}, k=5)
        r.hits; r.answer; r.cost
        async for ev in p.astream("..."): ...   # {"type": "text", "text": ...} ... {"type": "done", "answer": Answer}

A session runs one batch at a time (``run_batch``); the server gathers concurrent requests into
those batches, so a batch's embed call is shared and split across its queries as the ledger
splits every batch call.

It is the one query path: ``ragcost query`` (:func:`ragcost.runtime.query.run_queries`) and
``ragcost serve`` run their batches on it, so the ledger's rows, the tracing spans and the
lifetime of the capacity held are written in one place, each call priced once. A session records
its lifetime (``kind`` 'session', from open to close; 'batch' for ``ragcost query``; serve keeps
its own, ``ragcost.serve.lifetime``) and, with ``tracing: {enabled: true}``, one span tree per
query it records.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional

from ragcost.errors import StoreError
from ragcost.records import Hit, QueryState
from ragcost.runtime.pipeline import Pipeline

OnEvent = Callable[[QueryState, str, str], None]


_ROW_FIELDS = frozenset({"route"})  # route fields the row above already has


@dataclass
class Answer:
    """One answered (or failed) query: results, answer, and the ledger rows that price it."""

    id: str
    text: str
    hits: list[dict[str, Any]]  # doc_id, chunk_no, score, title, text, metadata: read while the batch ran
    answer: Optional[str]
    citations: list[str]
    ok: bool
    error: Optional[str]
    outcome: str
    tenant: Optional[str]
    useful: int
    rows: list[dict[str, Any]]  # ledger stage rows: cost_usd is this query's share of each call
    notes: dict[str, Any] = field(default_factory=dict)  # what the stages reported, to show (QueryState.facts)
    generation: dict[str, Any] = field(default_factory=dict)  # the generate stage's facts (finish_reason, abstained)
    route: Optional[str] = None
    route_fields: dict[str, Any] = field(default_factory=dict)  # route_path, route_score, route_reason
    outcome_stage: Optional[str] = None
    strategy: Any = None  # what the retrieve call reported (exact scan or the index's filtered search)
    cache: Optional[dict[str, Any]] = None  # the ledger's cache column (QueryState.cache_record)
    user: Optional[str] = None  # a label the caller gave (ragcost serve: the OpenAI request's user)
    source_id: Optional[str] = None  # the caller's own id (a --queries line's _id): the ledger's source_id
    ledger_id: Optional[str] = None  # the ledger's query_id (QueryState.ledger_id); None: the id, or a fresh one with source_id
    useful_judge: Optional[str] = None  # the judge that counted ``useful`` (e.g. "cited")
    partial: Optional[dict[str, Any]] = None  # shards missing from the results (Ray-served shards); None = complete
    records: list[Any] = field(default_factory=list, repr=False)  # the calls' UsageRecords, in ``rows`` order (for spans)

    @property
    def cost(self) -> float:
        """Dollars this query cost: its share of every call that served it, plus amortised storage."""
        return sum(float(r["cost_usd"]) for r in self.rows)

    def stages(self) -> list[dict[str, Any]]:
        """Per stage: latency, calls, items in the call and this query's $ (storage included)."""
        return [{"stage": r["stage"], "resource": r["resource"], "ms": round(r["wall_seconds"] * 1000, 3),
                 "calls": r["calls"], "items": r["items"], "cost_usd": r["cost_usd"]} for r in self.rows]

    def abandon(self, reason: str) -> None:
        """Mark a query its client gave up on (disconnect, deadline): recorded with ``reason``, never as a success."""
        self.ok, self.error, self.outcome, self.useful = False, reason, "failed", 0

    def ledger_query(self) -> dict[str, Any]:
        # With a caller's id the ledger's query_id is its own (one --queries file run twice never collides).
        query_id = self.ledger_id or (self.id if self.source_id is None else None)
        return {"query_id": query_id, "source_id": self.source_id,
                "useful_judge": self.useful_judge, "text": self.text, "ok": self.ok, "useful": self.useful,
                "retrieved": len(self.hits), "error": self.error, "outcome": self.outcome,
                "outcome_stage": self.outcome_stage, "route": self.route, "tenant": self.tenant, "cache": self.cache,
                "user_label": self.user, "partial": self.partial,
                **{k: v for k, v in self.route_fields.items() if k not in _ROW_FIELDS}}

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "ok": self.ok, "error": self.error, "outcome": self.outcome, "tenant": self.tenant,
            "answer": self.answer, "citations": self.citations, "useful": self.useful,
            "strategy": self.strategy, "hits": self.hits,
            "cache": None if not self.cache else {k: self.cache.get(k) for k in ("tier", "similarity", "verified")},
            "stages": self.stages(), "cost_usd": self.cost, "partial": self.partial,
        }


def _hit(h: Hit) -> dict[str, Any]:
    return {"doc_id": h.doc_id, "chunk_no": h.chunk_no, "score": float(h.score), "title": h.title,
            "text": h.text, "metadata": h.metadata}


def and_filters(*filters: Optional[dict]) -> Optional[dict]:
    """Every given filter must hold: a key's filter ANDed with the caller's can only narrow, never widen."""
    parts = [f for f in filters if f]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"$and": parts}


class Session:
    """A loaded, warmed pipeline that answers queries and records each one in the ledger.

    ``path``: a pipeline file, or a loaded :class:`Pipeline` (then the caller closes it). ``lifetime``: the kind of
    the lifetime row the session records while it holds its instance ('session', 'batch'), None for none (``ragcost
    serve`` records its own); ``held_since``: when the process began to hold it (default: when the session was
    opened, before loading); ``trace``: emit the pipeline's query spans when its ``tracing`` is on (serve emits
    them under its request spans instead); ``beat_every_s``: the lifetime's heartbeat after a write at most this
    often (0: after every write, as a batch run does).
    """

    def __init__(self, path: "str | Path | Pipeline", ledger_url: Optional[str] = None, write_ledger: bool = True, *,
                 lifetime: Optional[str] = "session", held_since: Any = None, trace: bool = True,
                 beat_every_s: Optional[float] = None) -> None:
        from ragcost.cost.ledger import Ledger, utcnow
        from ragcost.cost.lifetime import HEARTBEAT_S

        self._opened_at = held_since if held_since is not None else utcnow()
        self._own_pipe = not isinstance(path, Pipeline)
        self.pipe = Pipeline.load(path) if self._own_pipe else path  # type: ignore[arg-type]
        self._require_store()
        self._lock = threading.Lock()  # stages are not re-entrant: one batch at a time
        self.tracer: Any = None
        self._models: dict[str, str] = {}
        if trace and self.pipe.config.tracing.enabled:  # its p95 seeded from the ledger's recent queries, read before
            self.tracer = _tracer(self.pipe, ledger_url)  # the ledger is opened here for writing
            self._models = _stage_models(self.pipe)
        if write_ledger:
            self.pipe.store()  # opened first: a store another process holds is named as the store, not as the ledger in it
        self.ledger = Ledger(ledger_url or self.pipe.config.store_url) if write_ledger else None
        self.run_id: Optional[str] = None
        self.replica: Optional[str] = None  # the serve replica whose rows these are (ragcost serve sets it)
        self.lifetime_kind = lifetime
        self.life_id: Optional[str] = None
        self.beat_every_s = HEARTBEAT_S if beat_every_s is None else beat_every_s
        self._beat_at = 0.0
        self._gens = [s for s in self.pipe.stages() if s.makes_answer]
        self._storage: Optional[tuple[int, int]] = None
        self._warm = False
        self._checked: set[str] = set()  # filters already compiled against the declared fields

    def _require_store(self) -> None:
        file = self.pipe.store_file
        if file is not None and not file.is_file():
            from ragcost.runtime.load import no_store_message

            raise StoreError(no_store_message(file, self.pipe.path))

    @property
    def name(self) -> str:
        return self.pipe.config.name

    def warm_up(self, ready_at: Any = None) -> None:
        """Load every model and the index now, so the first query is not the slow one; then open the ledger's run,
        the lifetime (loading was its start-up: ready at ``ready_at``, default now) and the tracer."""
        from ragcost.runtime.cpu import METER

        self.pipe.warm_up()
        self._storage = self.pipe.storage_bytes()
        self.pipe.storage_usd_per_query()  # the store's and index's sizes, measured once per loaded pipeline
        if self.ledger is not None and self.run_id is None:
            from ragcost.cost.ledger import utcnow

            self.run_id = self.ledger.start_run("query", self.name, self.pipe.price_book.version, {"path": str(self.pipe.path)},
                                                replica=self.replica)
            if self.lifetime_kind is not None:
                self.life_id = self.ledger.start_lifetime(self.lifetime_kind, self.name, self.pipe.config.resource,
                                                          self.run_id, at=self._opened_at, replica=self.replica,
                                                          ready_at=ready_at or utcnow())
        # The run's setup (the ledger's run and lifetime rows, the tracer, the sizes) is start-up, as a server does it
        # once per process, not the first batch's overhead; loading the models is no query's CPU either.
        METER.own_thread()
        METER.baseline()
        self._warm = True

    def state(self, text: str, filter: Optional[dict] = None, k: Optional[int] = None,
              tenant: Optional[str] = None, id: Optional[str] = None) -> QueryState:
        """A query state; its text, k and filter are checked now (a QueryError or FilterError names the value)."""
        from ragcost.cost.compute import new_id
        from ragcost.runtime.request import check_k, check_text
        from ragcost.store.filters import parse_filter

        check_text(text)
        k = check_k(k)
        expr = parse_filter(filter)
        if expr is not None:
            self.check_filter(expr)
        fetch, keep = self.pipe.query_sizes(k)
        return QueryState(text=text, id=id or new_id(), k=fetch, filter=expr, tenant=tenant, keep=keep)

    def check_declared(self, filter: Optional[dict]) -> None:
        """A filter checked against the pipeline's declared fields and the operators, without the store (an API key's
        filter, when the keys are loaded): a FilterError names the field or operator."""
        from ragcost.store.filters import compile_filter, parse_filter
        from ragcost.store.sql_schema import Tables

        expr = parse_filter(filter)
        if expr is not None:
            t = Tables(self.pipe.config.name, self.pipe.config.fields)
            compile_filter(expr, self.pipe.config.fields, t.documents, t.values)

    def check_filter(self, expr: dict) -> None:
        """An unknown field or operator fails here, in one line, before the query joins a batch.

        A SQL store's filter is compiled (not run), once per distinct filter: a tenant's key filter
        is checked on its first query only.
        """
        import json

        key = json.dumps(expr, sort_keys=True, default=str)
        if key in self._checked:
            return
        store = self.pipe.store()
        if all(hasattr(store, a) for a in ("fields", "documents", "values")):
            from ragcost.store.filters import compile_filter

            compile_filter(expr, store.fields, store.documents, store.values)
        else:  # another store: run it
            store.matching_labels(expr)
        if len(self._checked) > 10_000:
            self._checked.clear()
        self._checked.add(key)

    def run_batch(self, states: list[QueryState], on_event: Optional[OnEvent] = None) -> list[Answer]:
        """One batch through every stage; each answer carries its ledger rows (not yet written)."""
        return self.run_states(states, on_event)[1]

    def run_states(self, states: list[QueryState], on_event: Optional[OnEvent] = None) -> tuple[Any, list[Answer]]:
        """:meth:`run_batch`, with the runner's result (every stage call, the overhead's included) beside the answers."""
        from ragcost.cost.compute import stage_row, storage_row
        from ragcost.runtime.judge import judge_label
        from ragcost.runtime.cpu import METER
        from ragcost.runtime.judge import useful_count
        from ragcost.runtime.runner import overhead_call

        if not self._warm:
            self.warm_up()
        METER.own_thread()
        with self._lock:
            # This batch's handler; none given leaves a handler the caller set on the stage itself (a pipeline loaded
            # and handed to run_queries), and the one before is put back after the batch either way.
            before = [g.on_event for g in self._gens]
            if on_event is not None:
                for g in self._gens:
                    g.on_event = on_event
            try:
                res = self.pipe.run(states)
            finally:
                for g, h in zip(self._gens, before):
                    g.on_event = h
            # CPU outside stage calls since the last claim (ledger writes, parsing): an overhead row.
            over = overhead_call(res.states, self.pipe.config.resource, self.pipe.price_book)
            if over is not None:
                res.calls.append(over)
        book = self.pipe.price_book
        self._storage = self.pipe.storage_bytes()  # the exact-scan copy's RAM as resident now (re-read at most once a second)
        judge = judge_label(self.pipe)
        out = []
        for s in res.states:
            records = [c.record for c in res.calls if c.serves(s)]
            rows = [stage_row(c.record, book, c.call_id) for c in res.calls if c.serves(s)]
            rows.append(storage_row(*self._storage, book))
            out.append(Answer(
                id=s.id, text=s.text, hits=[_hit(h) for h in s.hits], answer=s.answer, citations=list(s.citations), ok=s.ok,
                error=s.error, outcome=s.outcome, tenant=s.tenant, useful=useful_count(self.pipe, s) if s.ok else 0,
                rows=rows, notes=s.facts(), route=s.route, route_fields=s.route_fields(), outcome_stage=s.outcome_stage,
                cache=s.cache_record(), partial=s.partial, records=records, generation=dict(s.generation),
                source_id=s.source_id, ledger_id=s.ledger_id, useful_judge=judge,
                strategy=next((c.record.strategies for c in res.calls if c.serves(s) and c.record.strategies), None)
                or ({s.strategy: 1} if s.cache and s.strategy else None)))
        return res, out

    def record(self, answer: Answer) -> None:
        """Write one answer's query and stage rows in one transaction (nothing when the ledger is off)."""
        self.record_many([answer])

    def record_many(self, answers: list[Answer], trace: bool = True) -> list[str]:
        """Write several answers' rows in one transaction (a group commit: all or none), beat the lifetime, and
        emit their spans (``trace``, when the pipeline's tracing is on); the ledger's query ids, in order."""
        if not answers:
            return []
        if not self._warm:
            self.warm_up()
        ids: list[str] = []
        if self.ledger is not None:
            ids = self.ledger.record_queries(self.run_id, [(self._row(a), a.rows) for a in answers])
            self.beat()
        if trace:
            self.trace(answers)
        return ids

    def beat(self, force: bool = False) -> None:
        """The lifetime's heartbeat (a crash later is bounded by it): at most every ``beat_every_s``, or now."""
        import time

        if self.ledger is None or self.life_id is None:
            return
        now = time.monotonic()
        if force or now - self._beat_at >= self.beat_every_s:
            self.ledger.heartbeat(self.life_id)
            self._beat_at = now

    def trace(self, answers: list[Answer]) -> None:
        """One span tree per answer: its stage calls with this query's share of each (its ledger rows' dollars, priced
        once), its storage in the root's cost."""
        if self.tracer is None:
            return
        from ragcost.cost.tracing import query_latency

        for a in answers:
            n = len(a.records)
            self.tracer.record_query(a.id, a.records, [float(r["cost_usd"]) for r in a.rows[:n]], query_latency(a.rows),
                                     is_error=not a.ok, error=a.error,
                                     storage_usd=sum(float(r["cost_usd"]) for r in a.rows[n:]), models=self._models)

    def _row(self, answer: Answer) -> dict[str, Any]:
        return {**answer.ledger_query(), "replica": self.replica}

    def query(self, text: str, filter: Optional[dict] = None, k: Optional[int] = None,
              tenant: Optional[str] = None) -> Answer:
        """Answer one query and record it in the ledger."""
        answer = self.run_batch([self.state(text, filter, k, tenant)])[0]
        self.record(answer)
        return answer

    async def astream(self, text: str, filter: Optional[dict] = None, k: Optional[int] = None,
                      tenant: Optional[str] = None) -> AsyncIterator[dict[str, Any]]:
        """Events as generation streams: ``{"type": "text", "text": piece}``..., then ``{"type": "done", "answer": Answer}``."""
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()
        state = self.state(text, filter, k, tenant)

        def on_event(s: QueryState, kind: str, payload: str) -> None:
            if kind != "sources":  # for stream checkers (ragcost.serve.gate), not callers
                loop.call_soon_threadsafe(q.put_nowait, {"type": kind, "text": payload})

        def work() -> Answer:
            answer = self.run_batch([state], on_event)[0]
            self.record(answer)
            return answer

        fut = loop.run_in_executor(None, work)
        fut.add_done_callback(lambda _: loop.call_soon_threadsafe(q.put_nowait, None))
        while True:
            ev = await q.get()
            if ev is None:
                break
            yield ev
        yield {"type": "done", "answer": await fut}

    def close(self, stop_lifetime: bool = True) -> None:
        """Finish the run, stop the lifetime (``stop_lifetime``: a batch process stops it at its exit instead) and
        release the ledger; the pipeline too when the session loaded it."""
        if self.ledger is not None:
            try:
                if self.life_id is not None and stop_lifetime:
                    self.ledger.stop_lifetime(self.life_id)
                if self.run_id is not None:
                    self.ledger.finish_run(self.run_id)
            finally:
                self.ledger.close()
                self.ledger = None
        if self._own_pipe:
            self.pipe.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open(path: str | Path, ledger_url: Optional[str] = None, write_ledger: bool = True) -> Session:  # noqa: A001
    """A session over the pipeline at ``path``; use it as a context manager so the ledger run is closed."""
    return Session(path, ledger_url=ledger_url, write_ledger=write_ledger)


def _tracer(pipe: Pipeline, ledger_url: Optional[str] = None) -> Any:
    """The query tracer, its p95 seeded from the ledger's recent queries of this pipeline."""
    from ragcost.cost.tracing import QueryTracer, recent_latencies

    tracer = QueryTracer(fraction=pipe.config.tracing.sample_fraction)
    tracer.p95.seed(recent_latencies(ledger_url or pipe.config.store_url, pipe.config.name, tracer.p95.samples.maxlen or 0))
    return tracer


def _stage_models(pipe: Pipeline) -> dict[str, str]:
    """Each stage's model, for spans: the embedding model, a re-ranker's or generator's ``model``."""
    out: dict[str, str] = {}
    for st in pipe.stages():
        params = getattr(st, "params", None)
        model = pipe.config.embed.model if st.embeds_queries else (
            getattr(params, "model", None) or (getattr(params, "model_extra", None) or {}).get("model"))
        if isinstance(model, str) and model:
            out[st.name] = model
    return out
