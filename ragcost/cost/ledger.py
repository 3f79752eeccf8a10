"""The cost ledger: runs, queries and stage calls in SQL tables, through SQLAlchemy Core.

Default URL ``duckdb:///.ragcost/ledger.duckdb`` (duckdb-engine); a team's PostgreSQL works by
URL (``postgresql+psycopg://...``). Ids are uuid4 hex strings: no autoincrement or sequences,
which duckdb-engine handles badly. Times are naive UTC.

Schema
------
``rc_ledger_runs``: one per ``ragcost query`` invocation or evaluation run.
    run_id (pk), kind ('query' | 'eval'), pipeline, started_at, finished_at (NULL while running),
    price_book_version, config (JSON text).
``rc_ledger_queries``: one per query.
    query_id (pk), run_id, at, text, ok (the request succeeded), useful (useful documents
    delivered), cost_usd (sum of its stage rows), retrieved (documents in the final context), error,
    outcome (continued | branched | finished | blocked | failed), outcome_stage, route, tenant
    (the API key's tenant under ``ragcost serve``), partial (shards missing from the answer, JSON), useful_expected (the judge's count, a float for the
    expected-useful judge), useful_judge (which judge), route_path (every target in order,
    ``small>large`` after an escalation), route_score and route_reason (the router's decision).
``rc_ledger_stage_calls``: one per (query, stage call).
    id (pk), query_id, run_id, call_id (the rows of one batch call share it), seq (stage order
    within the query), stage, resource,
    wall_seconds, cpu_seconds (process CPU time; NULL = not measured), items, shared_by, calls,
    retries, failures, input_tokens, cached_input_tokens (NULL = the server did not say),
    output_tokens, tokens_estimated (the counts were counted or estimated, not reported), bytes --
    these are the *call's* totals, so sum them over distinct call_id -- busy_share (this row's
    share of its busy period, NULL = items / shared_by) and cost_usd, *this query's* share of the
    call, so sum it over rows. Amortised storage is a row with stage 'storage' and calls 0.
    node: the Ray node (IP) a shard actor's call ran on (``retrieve:shard-i`` rows, priced on the
    resource ``index.serve.nodes`` names for it); NULL elsewhere.

``rc_ledger_lifetimes``: one per process that held provisioned capacity (``ragcost serve``, a batch
    ``ragcost query``, a ``ragcost.open()`` session from open to close): lifetime_id (pk), kind ('serve' | 'batch' |
    'session'), pipeline, run_id, resource (the
    price-book resource the process runs on), host, pid, workers (processes this row stands for),
    started_at, heartbeat_at (the last time it was seen alive: a crash still bounds it), stopped_at
    (NULL while alive or after a crash), replica (the ``ragcost serve`` replica, ``serve.replica``;
    NULL for a batch), ready_at (loading done) and stopping_at (the last query done): start-up is
    started_at..ready_at and shutdown stopping_at..stopped_at (NULL: not recorded). ``rc_ledger_runs`` and ``rc_ledger_queries`` carry the replica too. A ledger written before this table existed has none:
    reports then say so and fall back to the book's declared traffic.

Migrations are additive: missing tables and columns are created, nothing is ever dropped.
Each query's rows are written in one transaction: a crash leaves no partial query.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Iterable

import sqlalchemy as sa

from ragcost.errors import StoreError
from ragcost.urls import db_file, shown_url, url_problem, without_secrets

DEFAULT_URL = "duckdb:///.ragcost/ledger.duckdb"

metadata = sa.MetaData()

runs = sa.Table(
    "rc_ledger_runs", metadata,
    sa.Column("run_id", sa.String(32), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("pipeline", sa.String(200), nullable=False),
    sa.Column("started_at", sa.DateTime, nullable=False),
    sa.Column("finished_at", sa.DateTime),
    sa.Column("price_book_version", sa.String(64)),
    sa.Column("config", sa.Text),
    sa.Column("replica", sa.String(64)),  # the ``ragcost serve`` replica that ran it (serve.replica); NULL otherwise
)

queries = sa.Table(
    "rc_ledger_queries", metadata,
    sa.Column("query_id", sa.String(64), primary_key=True),
    sa.Column("run_id", sa.String(32), nullable=False, index=True),
    sa.Column("at", sa.DateTime, nullable=False, quote=True),  # AT is reserved in DuckDB
    sa.Column("text", sa.Text),
    sa.Column("ok", sa.Boolean, nullable=False),
    sa.Column("useful", sa.Integer, nullable=False),
    sa.Column("cost_usd", sa.Double, nullable=False),
    sa.Column("retrieved", sa.Integer, nullable=False),
    sa.Column("error", sa.Text),
    # How the query's trip ended: continued (ran every stage), branched, finished (answered early,
    # e.g. a cache hit), blocked (a guard) or failed; the stage that decided it; a router's target.
    sa.Column("outcome", sa.String(16)),
    sa.Column("outcome_stage", sa.String(100)),
    sa.Column("route", sa.String(100)),
    sa.Column("cache", sa.Text),  # a cache hit, as JSON: {"tier": exact|semantic, "entry": id, "similarity": x}
    sa.Column("tenant", sa.String(200)),  # the API key's tenant when served (ragcost serve); NULL otherwise
    sa.Column("user_label", sa.String(200)),  # the caller's label (an OpenAI request's user); NULL otherwise
    # A route stage's decision (additive: older rows read NULL).
    sa.Column("route_path", sa.String(200)),  # targets in order: small, or small>large after an escalation
    sa.Column("route_score", sa.Double),
    sa.Column("route_reason", sa.Text),  # why; "undecided (...); default target 'large'" when the router could not say
    # The useful count as the judge made it (additive: older rows read NULL, and ``useful`` holds their count):
    # a float for the expected-useful judge (sum of P(relevant)); ``useful`` is then its rounding.
    sa.Column("useful_expected", sa.Double),
    sa.Column("useful_judge", sa.String(200)),  # the judge that counted it, e.g. "cited" or "calibrated isotonic(score) on scifact"
    # Shards missing from the answer (served by Ray actors, one died and its retry failed), as JSON:
    # {"missing_shards": [1], "shards": 4}; NULL = every shard answered (additive: older rows read NULL).
    sa.Column("partial", sa.Text),
    # The ``ragcost serve`` replica that answered it (serve.replica, default host:port); NULL outside serve
    # (additive: older rows read NULL).
    sa.Column("replica", sa.String(64)),
    # The caller's own id for the query: a `ragcost query --queries` line's _id (additive: older rows read NULL;
    # NULL when the caller gave none). query_id stays the ledger's own, so one file run twice never collides.
    sa.Column("source_id", sa.String(200)),
)

stage_calls = sa.Table(
    "rc_ledger_stage_calls", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("query_id", sa.String(64), nullable=False, index=True),
    sa.Column("run_id", sa.String(32), nullable=False),
    sa.Column("call_id", sa.String(64), nullable=False),
    sa.Column("seq", sa.Integer),  # the row's position within its query: stage order
    sa.Column("stage", sa.String(100), nullable=False),
    sa.Column("resource", sa.String(200), nullable=False),
    sa.Column("wall_seconds", sa.Double, nullable=False),
    sa.Column("items", sa.Integer, nullable=False),
    sa.Column("shared_by", sa.Integer, nullable=False),
    sa.Column("calls", sa.Integer, nullable=False),
    sa.Column("retries", sa.Integer, nullable=False),
    sa.Column("failures", sa.Integer, nullable=False),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("cached_input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("cost_usd", sa.Double, nullable=False),
    # Added by the cost-truth pass (additive: older rows read NULL).
    sa.Column("cpu_seconds", sa.Double),  # process CPU time of the call; NULL = not measured
    sa.Column("busy_share", sa.Double),  # this row's share of its busy period; NULL = items / shared_by
    sa.Column("tokens_estimated", sa.Boolean),  # token counts counted/estimated here, not the server's
    sa.Column("node", sa.String(200)),  # the Ray node (IP) a shard actor's call ran on; NULL = the querying process
)

lifetimes = sa.Table(
    "rc_ledger_lifetimes", metadata,
    sa.Column("lifetime_id", sa.String(32), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("pipeline", sa.String(200), nullable=False),
    sa.Column("run_id", sa.String(32)),
    sa.Column("resource", sa.String(200), nullable=False),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("pid", sa.Integer),
    sa.Column("workers", sa.Integer, nullable=False),
    sa.Column("started_at", sa.DateTime, nullable=False),
    sa.Column("heartbeat_at", sa.DateTime, nullable=False),
    sa.Column("stopped_at", sa.DateTime),
    sa.Column("replica", sa.String(64)),  # the serve replica this process is (serve.replica); NULL for a batch
    # Added by the third truth pass (additive: older rows read NULL): the process's phases within its life.
    sa.Column("ready_at", sa.DateTime),  # loading done: the first query could run (started_at..ready_at is start-up)
    sa.Column("stopping_at", sa.DateTime),  # the last query done: shutdown began (stopping_at..stopped_at is shutdown)
)
# Tables a read-only reader may find missing (a ledger an older ragcost wrote): read as empty.
OPTIONAL_TABLES = {"rc_ledger_lifetimes"}
LIFETIME_KINDS = ("serve", "batch", "session")

_STAGE_DEFAULTS = {"items": 1, "calls": 1, "retries": 0, "failures": 0, "bytes": 0, "wall_seconds": 0.0,
                   "input_tokens": None, "cached_input_tokens": None, "output_tokens": None,
                   "cpu_seconds": None, "busy_share": None, "tokens_estimated": False, "node": None}


def utcnow() -> datetime:
    """Naive UTC, so DuckDB and PostgreSQL store the same thing."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _new_id() -> str:
    from ragcost.cost.compute import new_id

    return new_id()


class Ledger:
    """The ledger at ``url``; tables are created or extended (never dropped) on open.

    ``read_only=True`` (what reports use) never creates a file, a table or a column: a missing
    file or missing tables are a StoreError that says to run ``ragcost query`` first.
    """

    def __init__(self, url: str = DEFAULT_URL, read_only: bool = False):
        self.url = url
        self.read_only = read_only
        shown = shown_url(url)
        problem = url_problem(url)
        if problem:
            raise StoreError(f"ledger {problem}; fix --ledger or the pipeline's store")
        path = db_file(url)
        if read_only and path is not None and not path.is_file():
            raise StoreError(f"no ledger at {path}; run `ragcost query` or `ragcost eval` first, or pass --ledger URL")
        if path is not None and not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        self.engine = None
        try:
            if read_only:  # DuckDB's own read-only mode: a read-only disk or file can still be reported on
                from ragcost.store.readonly import read_only_engine

                self.engine = read_only_engine(url)
            else:
                self.engine = sa.create_engine(url)
            if read_only:
                self.check_tables()
            else:
                self.migrate()
        except Exception as e:
            if self.engine is not None:
                self.engine.dispose()  # DuckDB: release the file, so this process can open it again
            if isinstance(e, StoreError):
                raise
            from ragcost.store.sql_errors import held_message, is_locked

            if is_locked(e):
                raise StoreError(held_message(url, e, "ledger")) from None
            # a bad URL or an unreachable server: one line, with the fix
            raise StoreError(f"ledger {shown}: cannot open ({type(e).__name__}: {without_secrets((str(e).splitlines() or [''])[0][:200], url)}); "
                             "check the SQLAlchemy URL, e.g. duckdb:///.ragcost/ledger.duckdb") from None

    def check_tables(self) -> None:
        """Every ledger table is there (read-only: nothing is created). Columns a newer ragcost added
        and an older one did not write are read as NULL (``read`` leaves them out of its SELECT)."""
        self._columns = {}
        with self.engine.connect() as conn:
            for table in metadata.sorted_tables:
                try:
                    have = set(conn.execute(sa.select(sa.text("*")).select_from(sa.table(table.name)).limit(0)).keys())
                except sa.exc.DBAPIError:
                    if table.name in OPTIONAL_TABLES:
                        conn.rollback()  # PostgreSQL: the failed statement aborted the transaction
                        continue
                    raise StoreError(f"no ledger tables in {shown_url(self.url)}; run `ragcost query` first") from None
                self._columns[table.name] = have

    def _cols(self, table: sa.Table) -> list:
        have = getattr(self, "_columns", {}).get(table.name)
        return [c for c in table.columns if have is None or c.name in have]

    def migrate(self) -> None:
        """Create missing tables, add missing columns; never drop or alter what is there."""
        from ragcost.store.ddl import ddl_lock

        with self.engine.begin() as conn:
            ddl_lock(conn, "ledger")  # replicas opening one fresh PostgreSQL ledger at once
            metadata.create_all(conn, checkfirst=True)
            for table in metadata.sorted_tables:
                # Not sa.inspect().get_columns: duckdb-engine's reflection breaks on SQLAlchemy 2.1
                # (pg_collation); an empty SELECT's keys work on every backend.
                have = set(conn.execute(sa.select(sa.text("*")).select_from(sa.table(table.name)).limit(0)).keys())
                for col in table.columns:
                    if col.name not in have:
                        coltype = col.type.compile(dialect=self.engine.dialect)
                        conn.execute(sa.text(f'ALTER TABLE {table.name} ADD COLUMN "{col.name}" {coltype}'))

    def close(self) -> None:
        # DuckDB allows one writing process: release the file as soon as a command is done.
        self.engine.dispose()

    def checkpoint(self) -> None:
        """DuckDB: write what the WAL holds into the file now, the work closing would do (a no-op elsewhere). A
        process about to stamp its exit does this first, so the close after the stamp has little left to write."""
        if self.engine.url.get_backend_name() != "duckdb":
            return
        with self.engine.connect() as conn:
            try:
                conn.exec_driver_sql("CHECKPOINT")
                conn.commit()
            except sa.exc.DBAPIError:  # another connection holds a transaction open: closing will checkpoint
                conn.rollback()

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start_run(self, kind: str, pipeline: str, book_version: str | None, config: dict | None = None,
                  replica: str | None = None) -> str:
        """Open a run and return its id."""
        if kind not in ("query", "eval"):
            raise StoreError(f"ledger: run kind {kind!r} is not 'query' or 'eval'")
        run_id = _new_id()
        with self.engine.begin() as conn:
            conn.execute(sa.insert(runs).values(
                run_id=run_id, kind=kind, pipeline=pipeline, started_at=utcnow(),
                price_book_version=book_version, config=json.dumps(config or {}, default=str, sort_keys=True),
                replica=replica))
        return run_id

    def finish_run(self, run_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.update(runs).where(runs.c.run_id == run_id).values(finished_at=utcnow()))

    def record_query(self, run_id: str, query: dict[str, Any], stage_rows: list[dict[str, Any]]) -> str:
        """Write one query and all its stage rows in ONE transaction; returns the query id."""
        return self.record_queries(run_id, [(query, stage_rows)])[0]

    def record_queries(self, run_id: str, items: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> list[str]:
        """Write several queries and their stage rows in ONE transaction (a group commit: all or none); their ids.

        A server's writer commits the queries that finished together at once: one commit, not one a query."""
        qrows, rows = [], []
        for query, stage_rows in items:
            qrow, srows = self._rows(run_id, query, stage_rows)
            qrows.append(qrow)
            rows.extend(srows)
        by_keys: dict[tuple, list[dict]] = {}  # one executemany per set of columns (a row may leave some out)
        for r in rows:
            by_keys.setdefault(tuple(sorted(r)), []).append(r)
        with self.engine.begin() as conn:  # rolled back as a whole on any error
            conn.execute(sa.insert(queries), qrows)
            for group in by_keys.values():
                conn.execute(sa.insert(stage_calls), group)
        return [q["query_id"] for q in qrows]

    def _rows(self, run_id: str, query: dict[str, Any], stage_rows: list[dict[str, Any]]) -> tuple[dict, list[dict]]:
        """One query's row and its stage rows as written; a bad stage row is a StoreError naming it."""
        known = {c.name for c in stage_calls.columns}
        for row in stage_rows:
            extra = set(row) - known
            if extra:
                raise StoreError(f"ledger: stage row has unknown column(s) {sorted(extra)}; known: {sorted(known)}")
            missing = {"stage", "resource", "cost_usd"} - {k for k, v in row.items() if v is not None}
            if missing:
                raise StoreError(f"ledger: stage row {row.get('stage', '?')!r} lacks {sorted(missing)}; "
                                 "build rows with ragcost.cost.compute.stage_row")
        qid = str(query.get("query_id") or _new_id())
        rows = []
        for seq, row in enumerate(stage_rows):
            full = {**_STAGE_DEFAULTS, **row, "seq": seq}
            full.setdefault("shared_by", full["items"])
            full.update(id=_new_id(), query_id=qid, run_id=run_id, call_id=row.get("call_id") or _new_id())
            rows.append(full)
        qrow = {
            "query_id": qid, "run_id": run_id, "at": query.get("at") or utcnow(), "text": query.get("text"),
            "ok": bool(query.get("ok", True)), "useful": int(round(float(query.get("useful", 0) or 0))),
            "useful_expected": float(query.get("useful", 0) or 0), "useful_judge": query.get("useful_judge"),
            "cost_usd": float(query["cost_usd"]) if query.get("cost_usd") is not None
            else sum(float(r["cost_usd"]) for r in rows),
            "retrieved": int(query.get("retrieved", 0)), "error": query.get("error"),
            "outcome": query.get("outcome"), "outcome_stage": query.get("outcome_stage"), "route": query.get("route"),
            "cache": json.dumps(query["cache"], sort_keys=True, default=str) if query.get("cache") else None,
            "tenant": query.get("tenant"), "user_label": query.get("user_label"), "route_path": query.get("route_path"),
            "route_score": query.get("route_score"), "route_reason": query.get("route_reason"),
            "partial": json.dumps(query["partial"], sort_keys=True) if query.get("partial") else None,
            "replica": query.get("replica"), "source_id": query.get("source_id"),
        }
        return qrow, rows

    def read(self, since: datetime | None = None, pipeline: str | None = None) -> tuple[list[dict], list[dict]]:
        """Queries (with their run's pipeline) and their stage rows, oldest first."""
        q = sa.select(*self._cols(queries), runs.c.pipeline, runs.c.kind).join(runs, runs.c.run_id == queries.c.run_id)
        if since is not None:
            q = q.where(queries.c.at >= _naive_utc(since))
        if pipeline is not None:
            q = q.where(runs.c.pipeline == pipeline)
        q = q.order_by(queries.c.at, queries.c.query_id)
        with self.engine.connect() as conn:
            qrows = [dict(r._mapping) for r in conn.execute(q)]
        missing_q = [c.name for c in queries.columns if c not in self._cols(queries)]
        for row in qrows:
            row.update(dict.fromkeys(missing_q))
        return qrows, self.stage_rows([r["query_id"] for r in qrows])

    def stage_rows(self, query_ids: list[str]) -> list[dict]:
        """The stage rows of these queries, in the order of ``query_ids``, each query's in stage order (an id the
        ledger does not hold has none)."""
        srows: list[dict] = []
        with self.engine.connect() as conn:
            for chunk in _chunks(list(query_ids), 500):  # bounded IN lists, for PostgreSQL's parameter limit
                s = sa.select(*self._cols(stage_calls)).where(stage_calls.c.query_id.in_(chunk))
                srows.extend(dict(r._mapping) for r in conn.execute(s))
        missing_s = [c.name for c in stage_calls.columns if c not in self._cols(stage_calls)]
        for row in srows:
            row.update(dict.fromkeys(missing_s))
        order = {qid: i for i, qid in enumerate(query_ids)}
        srows.sort(key=lambda r: (order[r["query_id"]], r["seq"] if r["seq"] is not None else 0))
        return srows

    # ---- provisioned capacity: the lifetimes of the processes that held it ----------------------
    def start_lifetime(self, kind: str, pipeline: str, resource: str, run_id: str | None = None,
                       workers: int = 1, host: str | None = None, pid: int | None = None,
                       at: datetime | None = None, replica: str | None = None, ready_at: datetime | None = None) -> str:
        """Record that a process holding ``resource`` started (``at``, default now; ``ready_at``, when its
        loading was done, if known); returns its id."""
        import os
        import socket

        if kind not in LIFETIME_KINDS:
            raise StoreError(f"ledger: lifetime kind {kind!r} is not one of {', '.join(LIFETIME_KINDS)}")
        if workers < 1:
            raise StoreError(f"ledger: lifetime workers={workers}; a process stands for at least 1 worker")
        lid = _new_id()
        now = _naive_utc(at) if at else utcnow()
        with self.engine.begin() as conn:
            conn.execute(sa.insert(lifetimes).values(
                lifetime_id=lid, kind=kind, pipeline=pipeline, run_id=run_id, resource=resource,
                host=host or socket.gethostname(), pid=os.getpid() if pid is None else pid, workers=workers,
                started_at=now, heartbeat_at=now, stopped_at=None, replica=replica,
                ready_at=_naive_utc(ready_at) if ready_at else None))
        return lid

    def mark_ready(self, lifetime_id: str, at: datetime | None = None) -> None:
        """The process's loading is done (its start-up phase ends): now, or ``at``."""
        with self.engine.begin() as conn:
            conn.execute(sa.update(lifetimes).where(lifetimes.c.lifetime_id == lifetime_id)
                         .values(ready_at=_naive_utc(at) if at else utcnow()))

    def heartbeat(self, lifetime_id: str, at: datetime | None = None) -> None:
        """The process is still alive: a crash after this is bounded by it."""
        with self.engine.begin() as conn:
            conn.execute(sa.update(lifetimes).where(lifetimes.c.lifetime_id == lifetime_id)
                         .values(heartbeat_at=_naive_utc(at) if at else utcnow()))

    def stop_lifetime(self, lifetime_id: str, at: datetime | None = None, stopping_at: datetime | None = None) -> None:
        """The process stopped (``at``, default now); ``stopping_at``: when its shutdown began, if known."""
        now = _naive_utc(at) if at else utcnow()
        values: dict[str, Any] = {"heartbeat_at": now, "stopped_at": now}
        if stopping_at is not None:
            values["stopping_at"] = _naive_utc(stopping_at)
        with self.engine.begin() as conn:
            conn.execute(sa.update(lifetimes).where(lifetimes.c.lifetime_id == lifetime_id).values(**values))

    def raise_call(self, run_id: str, call_id: str, query_ids: list[str], cpu_seconds: float, cost_usd: float) -> None:
        """Add CPU a shared call used after its rows were written (a batch process's exit handler: writing those rows)
        to each of its rows, and its per-query ``cost_usd`` share to the rows and to their queries: one transaction."""
        if not query_ids or (cpu_seconds <= 0 and cost_usd <= 0):
            return
        with self.engine.begin() as conn:
            conn.execute(sa.update(stage_calls).where(stage_calls.c.run_id == run_id, stage_calls.c.call_id == call_id)
                         .values(cpu_seconds=sa.func.coalesce(stage_calls.c.cpu_seconds, 0.0) + cpu_seconds,
                                 cost_usd=stage_calls.c.cost_usd + cost_usd))
            conn.execute(sa.update(queries).where(queries.c.query_id.in_(query_ids))
                         .values(cost_usd=queries.c.cost_usd + cost_usd))

    def add_to_queries(self, run_id: str, query_ids: list[str], rows: list[dict[str, Any]]) -> None:
        """Stage rows of calls shared by queries already written (a batch process's start-up CPU and the CPU
        after its last query), one row per (call, query), each query's cost_usd raised by its shares: one
        transaction. ``rows`` are built with ragcost.cost.compute.stage_row, ``cost_usd`` a query's share."""
        if not query_ids or not rows:
            return
        full = []
        for qid in query_ids:
            for seq, row in enumerate(rows):
                _, (r,) = self._rows(run_id, {"query_id": qid}, [row])
                full.append({**r, "seq": 1000 + seq})  # after the query's own calls
        extra = sum(float(r["cost_usd"]) for r in rows)
        with self.engine.begin() as conn:
            conn.execute(sa.insert(stage_calls), full)
            conn.execute(sa.update(queries).where(queries.c.query_id.in_(query_ids))
                         .values(cost_usd=queries.c.cost_usd + extra))

    def has_lifetimes_table(self) -> bool:
        have = getattr(self, "_columns", None)
        return have is None or lifetimes.name in have

    def read_lifetimes(self, pipeline: str | None = None) -> list[dict]:
        """Every lifetime row (of ``pipeline``'s processes), oldest first; [] for a ledger without the table."""
        if not self.has_lifetimes_table():
            return []
        q = sa.select(*self._cols(lifetimes))
        if pipeline is not None:
            q = q.where(lifetimes.c.pipeline == pipeline)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q.order_by(lifetimes.c.started_at, lifetimes.c.lifetime_id))]

    def list_runs(self) -> list[dict]:
        with self.engine.connect() as conn:
            found = [dict(r._mapping) for r in conn.execute(sa.select(*self._cols(runs)).order_by(runs.c.started_at))]
        return [{**dict.fromkeys(c.name for c in runs.columns), **r} for r in found]


def _naive_utc(dt: datetime) -> datetime:
    return dt.astimezone(timezone.utc).replace(tzinfo=None) if dt.tzinfo else dt


def _chunks(xs: list, n: int) -> Iterable[list]:
    for i in range(0, len(xs), n):
        yield xs[i:i + n]
