"""Plain records every layer shares: what a query is as it flows, what a stage call used, what a reader yields.

This module imports nothing of ragcost: it is the ground floor that the config, backends,
stages, runtime and CLI all stand on. Cost is computed elsewhere (``ragcost.cost.compute``).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np

# How a query's trip through the stages ended (or goes on). A stage says so explicitly with
# QueryState.finish / block / branch / fail; the runner records the outcome in the ledger.
CONTINUED = "continued"  # still flowing (the default)
BRANCHED = "branched"  # still flowing, down the branch a stage chose (``route``)
FINISHED = "finished"  # answered early (a cache hit): later stages skip it, it counts as a success
BLOCKED = "blocked"  # refused (a guard): later stages skip it, it is not a success
FAILED = "failed"  # a stage could not serve it: later stages skip it
OUTCOMES = (CONTINUED, BRANCHED, FINISHED, BLOCKED, FAILED)

# Ledger rows that are no stage's call: every query pays its share of them, a cache hit as much as a miss.
STORAGE_STAGE = "storage"  # the index's amortised storage
STARTUP_STAGE = "start-up"  # a batch process's CPU before its first query (imports, loading), charged to its queries at exit
OVERHEAD_STAGE = "overhead"  # ragcost's CPU outside stage calls (parsing, ledger writes, HTTP, idle pools)
PROCESS_ROWS = (STORAGE_STAGE, STARTUP_STAGE, OVERHEAD_STAGE)


@dataclass
class SourceDocument:
    """One document as a reader yields it."""

    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    origin: str = ""  # "file:line" or "file", for error messages


@dataclass
class UsageRecord:
    """One stage call (over a batch of ``items`` queries), or one query's own part of it.

    The runner fills ``wall_seconds``, ``items`` and ``calls``; the stage adds what only it
    knows (tokens, retries, failures, bytes). ``cached_input_tokens`` is ``None`` when the
    server did not say -- unknown, never silently 0. Records with the same ``call_id`` shared
    one busy period (concurrent generate attempts).
    """

    stage: str
    resource: str
    wall_seconds: float = 0.0
    items: int = 1
    calls: int = 1
    retries: int = 0
    failures: int = 0
    input_tokens: Optional[int] = None  # uncached input tokens
    cached_input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    bytes: int = 0
    shared_by: Optional[int] = None  # requests that shared this busy time; None = items
    call_id: Optional[str] = None  # records of one busy period share it; None = a call of its own
    # The share of the busy period this record pays (0..1); None = items / shared_by, as above.
    # Concurrent generate attempts share their endpoint's busy period in proportion to their duration.
    busy_share: Optional[float] = None
    # CPU time the call consumed (process CPU seconds across threads, measured by the runner);
    # None when not measured. Time-priced CPU resources with ``vcpus`` are charged by it.
    cpu_seconds: Optional[float] = None
    tokens_estimated: bool = False  # the token counts were counted or estimated here, not reported by the server
    # The Ray node (its IP) the call ran on -- a shard actor's; None = this process.
    node: Optional[str] = None
    # Facts a stage reports for the runner, the reports and the spans (declared, never read from ``notes``):
    work: Optional[dict[str, float]] = None  # query id -> units of work it made this batch call do: the time is split by them
    query_tokens: Optional[dict[str, int]] = None  # query id -> its own input tokens in this batch call
    remote: list["UsageRecord"] = field(default_factory=list)  # work done on other machines (shard actors), priced beside
    strategies: Optional[dict[str, int]] = None  # retrieve: queries each search strategy served (exact, native ...)
    model: Optional[str] = None  # a generate attempt's served model
    operation: Optional[str] = None  # a generate attempt's API: chat or text_completion
    ttft_s: Optional[float] = None  # a generate attempt's time to first token,
    tpot_s: Optional[float] = None  # time per output token
    e2e_s: Optional[float] = None  # and end-to-end time (its own request, not the busy period it shared)
    notes: dict[str, Any] = field(default_factory=dict)  # what the stage reports for people (summed per stage in reports)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Hit:
    """One retrieved chunk: label, document id and score, plus its title, text, chunk number and metadata.

    The retrieve stage may leave the last four to be read from the store on first use (``source``):
    one store call then fills every hit of that batch. Reading or setting any of them fills it first,
    so a guard's redaction is never overwritten by a late fill.
    """

    __slots__ = ("label", "doc_id", "score", "_title", "_text", "_chunk_no", "_metadata", "_source")

    def __init__(self, label: int, doc_id: str, score: float, title: str = "", text: str = "",
                 chunk_no: int = 0, metadata: Optional[dict[str, Any]] = None, source: Any = None) -> None:
        self.label = label
        self.doc_id = doc_id
        self.score = score
        self._title = title
        self._text = text
        self._chunk_no = chunk_no
        self._metadata = {} if metadata is None else metadata
        self._source = source  # anything with .row(label) -> store row dict or None

    def _fill(self) -> None:
        src, self._source = self._source, None
        row = src.row(self.label)
        if row is not None:
            self._title = row.get("title") or ""
            self._text = row.get("text") or ""
            self._chunk_no = row.get("chunk_no") or 0
            self._metadata = dict(row.get("metadata") or {})

    def _field(name: str):  # noqa: N805 - a property factory used in the class body only
        slot = "_" + name

        def get(self: "Hit") -> Any:
            if self._source is not None:
                self._fill()
            return getattr(self, slot)

        def set_(self: "Hit", value: Any) -> None:
            if self._source is not None:
                self._fill()
            setattr(self, slot, value)

        return property(get, set_)

    title = _field("title")
    text = _field("text")
    chunk_no = _field("chunk_no")
    metadata = _field("metadata")
    del _field

    @property
    def passage(self) -> str:
        """The text without the title line the chunker put before it (``chunking.title: every_chunk``, and the
        first window under ``prepend``): what to show or quote where the title is shown on its own."""
        title, text = self.title, self.text
        return text[len(title) + 1:] if title and text.startswith(title + "\n") else text

    def _key(self) -> tuple:
        return (self.label, self.doc_id, self.score, self.title, self.text, self.chunk_no, self.metadata)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hit) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Hit(label={self.label!r}, doc_id={self.doc_id!r}, score={self.score!r}, chunk_no={self.chunk_no!r})"


class QueryState:
    """One query as it flows through the stages.

    What a stage hands the next one is a declared field here, never a side channel:

    - ``vector``: the query embedding at the index's dimension; ``full_vector`` at the model's
      native dimension (set by the embed stage only when the index is truncated);
    - ``hits``: the current context, best first (may be held as one row of a batch's result
      arrays, ``set_ranked``, and built as ``Hit`` objects only when first read);
    - ``answer`` / ``citations``: what generation (or a cache hit) produced;
    - ``route``: the generate target a branching stage chose; ``routes``: every target it was
      sent to, in order (``["small", "large"]`` after an escalation);
    - ``usage``: per-query usage records the *current* stage call reported for this query alone
      (generate attempts); the runner takes them after the call and prices them instead of
      this query's share of the call's own record;
    - ``outcome`` / ``outcome_stage`` / ``error``: how the trip ended, set by ``finish``,
      ``block``, ``fail`` and ``branch``.
    """

    def __init__(self, text: str, id: str = "", k: int = 10, filter: Optional[dict] = None,
                 vector: Optional[np.ndarray] = None, hits: Optional[list[Hit]] = None,
                 answer: Optional[str] = None, citations: Optional[list[str]] = None,
                 notes: Optional[dict[str, Any]] = None, error: Optional[str] = None,
                 tenant: Optional[str] = None, keep: Optional[int] = None, source_id: Optional[str] = None) -> None:
        self.text = text
        self.id = id
        # The caller's own id for the query (a `ragcost query --queries` line's ``_id``), kept in the ledger's
        # ``source_id``; the ledger's ``query_id`` is then a fresh one, so a file run twice never collides.
        self.source_id = source_id
        # The ledger's query_id: the id, or with a caller's own id (or none) a fresh one. Known before the row is
        # written, so a stage can name the row this query will have (a cache entry names the miss that wrote it).
        self.ledger_id = id if id and source_id is None else uuid.uuid4().hex
        self.k = k  # hits the retrieve stage fetches
        # Results the request asked for when a re-rank decides the final count (its explicit k): the last re-rank
        # keeps exactly this many, earlier ones at least this many. None: each re-rank keeps its top_n.
        self.keep = keep
        self.filter = filter
        self.tenant = tenant
        # Generation options of this request (OpenAI's names: stop, max_tokens, temperature, seed ...),
        # set by ragcost serve from the client's request; the generate stage applies them.
        self.options: dict[str, Any] = {}
        self.vector = vector
        self.full_vector: Optional[np.ndarray] = None
        self._hits: list[Hit] = [] if hits is None else hits
        self._ranked: Any = None  # (block, row): results not yet turned into Hit objects
        self.answer = answer
        self.citations: list[str] = [] if citations is None else citations
        self.notes: dict[str, Any] = {} if notes is None else notes  # facts a stage keeps for itself (shown, never read elsewhere)
        # Facts one stage reports and others read, declared (``facts()`` shows them under their old note names):
        self.generation: dict[str, Any] = {}  # the generate stage's: finish_reason, abstained, unknown_terms, ...
        self.strategy: Optional[str] = None  # how retrieval (or a cache hit) found the hits
        self.matches: Optional[int] = None  # chunks a metadata filter allowed
        self.partial: Optional[dict[str, Any]] = None  # shards that did not answer: {"missing_shards": [...], "shards": n}
        self.findings: list[dict[str, Any]] = []  # what guard checks found (each with its check, policy, on)
        self.decision: dict[str, Any] = {}  # the route stage's: router, target, score, reason; escalations
        self.cache_trip: Optional[dict[str, Any]] = None  # the cache stage's lookup: scope, key, candidate, refused
        self.truncated: Optional[str] = None  # the embedder read only the query's first tokens: says how many
        self.route: Optional[str] = None
        self.routes: list[str] = []
        self.cache: Optional[dict[str, Any]] = None  # a cache hit: {"tier": exact|semantic, "entry": id, "similarity": x, "origin": query id}
        self.usage: list[UsageRecord] = []
        self.outcome = CONTINUED if error is None else FAILED
        self.outcome_stage: Optional[str] = None
        self._error = error

    def cache_record(self) -> Optional[dict[str, Any]]:
        """The ledger's ``cache`` column: the hit, or the miss of a query that went through a cache stage.

        ``tier`` is exact, semantic or miss; ``verified`` says a fresh retrieval checked the candidate,
        ``sampled`` that the check was of a hit that would otherwise have been served unverified, and
        ``correct`` what the check found. ``stage`` and ``write_stages`` name the cache's own stages; a hit's
        ``origin`` is the ledger query id of the miss that wrote the entry it served (None: an entry without one).
        None when the query met no cache stage.
        """
        seen = self.cache_trip
        if not isinstance(seen, dict) or "stage" not in seen:
            return dict(self.cache) if self.cache else None
        cand = seen.get("candidate") or {}
        own = {"stage": seen["stage"], "write_stages": list(seen.get("write_stages") or []),
               **({"corrected": seen["corrected"]} if seen.get("corrected") else {})}
        if self.cache:  # a check, if any, is of the nearest candidate (an alternate may have answered)
            return {**self.cache, **own, "sampled": bool(cand.get("sampled")),
                    "correct": cand.get("correct") if cand.get("judged") else None}
        refused = seen.get("refused") or []
        return {"tier": "miss", **own, "similarity": cand.get("similarity"), "verified": bool(cand.get("judged")),
                "sampled": bool(cand.get("sampled")), "correct": cand.get("correct"),
                **({"refused": refused[0].get("family")} if refused else {})}

    def cache_view(self) -> Optional[dict[str, Any]]:
        """What a caller is told of the cache (``query --json``, ``/v1/query``): ``{tier, similarity, verified}``, or None."""
        rec = self.cache_record()
        if not rec:
            return None
        return {"tier": rec.get("tier"), "similarity": rec.get("similarity"), "verified": bool(rec.get("verified"))}

    # ---- outcome ---------------------------------------------------------------------------
    @property
    def error(self) -> Optional[str]:
        return self._error

    @error.setter
    def error(self, value: Optional[str]) -> None:
        # Setting an error ends the trip; a stage should prefer block()/fail(), which name it.
        self._error = value
        if value is None:
            if self.outcome in (BLOCKED, FAILED):
                self.outcome = CONTINUED
        elif self.outcome in (CONTINUED, BRANCHED):
            self.outcome = BLOCKED if value.startswith("blocked") else FAILED

    @property
    def active(self) -> bool:
        """Whether later stages still run on this query."""
        return self.outcome in (CONTINUED, BRANCHED)

    @property
    def ok(self) -> bool:
        """A successful request: it went the whole way, or a stage answered it early."""
        return self._error is None and self.outcome in (CONTINUED, BRANCHED, FINISHED)

    def finish(self, stage: str, answer: Optional[str] = None, citations: Optional[list[str]] = None) -> None:
        """Answered early (e.g. by a cache): later stages skip it; it counts as a success."""
        if answer is not None:
            self.answer = answer
        if citations is not None:
            self.citations = list(citations)
        self.outcome, self.outcome_stage = FINISHED, stage

    def block(self, stage: str, reason: str) -> None:
        """Refused (e.g. by a guard): later stages skip it; ``error`` says why."""
        self._error = reason
        self.outcome, self.outcome_stage = BLOCKED, stage

    def fail(self, stage: str, reason: str) -> None:
        """The stage could not serve it: later stages skip it; ``error`` says why."""
        self._error = reason
        self.outcome, self.outcome_stage = FAILED, stage

    def branch(self, stage: str, target: str) -> None:
        """Goes on down ``target`` (e.g. a router picking the generate target)."""
        self.route = target
        self.routes.append(target)
        self.outcome, self.outcome_stage = BRANCHED, stage

    def escalate(self, stage: str, target: str, why: str) -> None:
        """The current target could not answer well (it failed, or a guard flagged its answer): go on
        down ``target``, forgetting the answer. ``decision["escalations"]`` keeps each step and why."""
        self.decision.setdefault("escalations", []).append({"from": self.route, "to": target, "stage": stage, "why": why})
        self.answer, self.citations = None, []
        self.branch(stage, target)

    def route_fields(self) -> dict[str, Any]:
        """The ledger's route columns: final target, the path (``small>large`` after an escalation), score, reason."""
        note = self.decision
        reason = note.get("reason")
        for e in note.get("escalations", []):
            reason = f"{reason}; escalated {e['from']}>{e['to']}: {e['why']}" if reason else f"escalated {e['from']}>{e['to']}: {e['why']}"
        return {"route": self.route, "route_path": ">".join(self.routes) or None,
                "route_score": note.get("score"), "route_reason": reason}

    def facts(self) -> dict[str, Any]:
        """Everything the stages reported about this query, for people and JSON: the stages' own notes and the
        declared facts under their names (generation, strategy, matches, partial, guard, route, cache)."""
        declared = {"generation": self.generation or None, "strategy": self.strategy, "matches": self.matches,
                    "partial": self.partial, "guard": self.findings or None, "route": self.decision or None,
                    "cache": self.cache_trip, "truncated": self.truncated}
        return {**self.notes, **{k: v for k, v in declared.items() if v is not None}}

    # ---- hits ------------------------------------------------------------------------------
    @property
    def hits(self) -> list[Hit]:
        if self._ranked is not None:
            block, row = self._ranked
            self._ranked = None
            self._hits = block.hits(row)
        return self._hits

    @hits.setter
    def hits(self, value: list[Hit]) -> None:
        self._ranked = None
        self._hits = value

    def set_ranked(self, block: Any, row: int) -> None:
        """Hold row ``row`` of ``block`` (anything with ``.hits(row) -> list[Hit]`` and ``.count(row)``) as the hits."""
        self._ranked = (block, row)

    @property
    def hit_count(self) -> int:
        """len(hits), without building Hit objects."""
        if self._ranked is not None:
            return self._ranked[0].count(self._ranked[1])
        return len(self._hits)

    def __repr__(self) -> str:
        return (f"QueryState(id={self.id!r}, text={self.text[:40]!r}, hits={self.hit_count}, "
                f"outcome={self.outcome!r}, error={self.error!r})")
