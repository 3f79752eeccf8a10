"""Retrieve with metadata filters, choosing a strategy by selectivity, and saying which it used.

- no filter: the index's own top-k (one batched search call);
- few matches (selectivity under ``exact_below``, or no more than ``exact_max_matches``):
  exact search over just the matching vectors;
- otherwise the index's native filtered search, with ef/nprobe raised as selectivity drops,
  falling back to exact whenever it returns fewer than k.
Post-filtering a plain top-k is never used: it silently loses recall.

Queries that share a filter (the usual case: ``ragcost query --filter``) are searched together:
one store lookup, one gather of the matching vectors and one batched search per distinct filter.
"""

from __future__ import annotations

import json
from typing import Optional

import numpy as np
from pydantic import Field

from ragcost.records import UsageRecord
from ragcost.index.collapse import DocMap, collapse
from ragcost.index.exact import rows_for_labels, scan_rows
from ragcost.records import Hit, QueryState
from ragcost.stages.base import COSINE, Stage, StageParams, stage_registry

# Calibrated with `python -m bench.filters` (100k x 384, 40 queries a bucket, 2 CPU cores, p95):
# at 10% selectivity the exact scan of the matches (5-6 ms) beats every native filtered search
# (hnswlib 67-95 ms, faiss HNSW 18-26 ms, IVF-Flat 6-6.5 ms); at 30% faiss HNSW (7-9 ms) and
# IVF-Flat (8-11 ms) beat the scan (14-15 ms) and hnswlib's Python-called filter is within 2x of
# it (17-28 ms). So scan below 15%; the numbers are in docs/benchmarks.md (filters).
EXACT_BELOW = 0.15
EXACT_MAX_MATCHES = 2048


class RetrieveParams(StageParams):
    k: int = Field(10, ge=1, le=10_000, description="results per query (overridden by `ragcost query -k`)")
    per_document: bool = Field(True, description="at most one chunk per document (the best)")
    exact_below: float = Field(EXACT_BELOW, ge=0, le=1, description="selectivity under which filtered search scans the matches exactly (1: always)")
    exact_max_matches: int = Field(EXACT_MAX_MATCHES, ge=0, description="always scan exactly when this few chunks match")
    fetch_text: bool = Field(
        True,
        description="read the results' text, title and metadata from the store in this stage (one call per batch, "
                    "timed and priced here); false reads them on first use, for callers that need only ids and scores",
    )


class ChunkSource:
    """The store rows behind one batch's results, fetched in a single call on first need."""

    __slots__ = ("_store", "_labels", "_rows")

    def __init__(self, store) -> None:
        self._store = store
        self._labels: list[np.ndarray] = []
        self._rows: Optional[dict[int, dict]] = None

    def add(self, labels) -> None:
        """Labels (an array, or a list) whose rows the batch may need; -1 entries are ignored."""
        self._labels.append(labels)

    def fetch(self) -> dict[int, dict]:
        if self._rows is None:
            every = (np.concatenate([np.asarray(x, dtype=np.int64).ravel() for x in self._labels])
                     if self._labels else np.empty(0, np.int64))
            wanted = np.unique(every[every >= 0]).tolist()
            self._rows = {r["label"]: r for r in self._store.chunks(wanted)} if wanted else {}
        return self._rows

    def row(self, label: int) -> Optional[dict]:
        return self.fetch().get(label)


class Ranked:
    """One search's results, row per query: labels, scores and document ordinals, padded with -1."""

    __slots__ = ("labels", "scores", "docs", "counts", "names", "source")

    def __init__(self, labels, scores, docs, counts, names, source) -> None:
        self.labels, self.scores, self.docs, self.counts, self.names, self.source = labels, scores, docs, counts, names, source

    def count(self, row: int) -> int:
        return int(self.counts[row])

    def hits(self, row: int) -> list[Hit]:
        n, names, src = int(self.counts[row]), self.names, self.source
        return [Hit(lb, names[d], sc, "", "", 0, None, src)
                for lb, sc, d in zip(self.labels[row, :n].tolist(), self.scores[row, :n].tolist(), self.docs[row, :n].tolist())]


class RankedRow:
    """One query's results as Python lists: ``Ranked`` for the single-query path, where building
    arrays would cost more than the lists it holds."""

    __slots__ = ("labels", "scores", "docs", "names", "source")

    def __init__(self, labels: list[int], scores: list[float], docs: list[int], names: list[str], source) -> None:
        self.labels, self.scores, self.docs, self.names, self.source = labels, scores, docs, names, source

    def count(self, row: int) -> int:
        return len(self.labels)

    def hits(self, row: int) -> list[Hit]:
        names, src = self.names, self.source
        return [Hit(lb, names[d], sc, "", "", 0, None, src) for lb, sc, d in zip(self.labels, self.scores, self.docs)]


class _Group:
    """Queries of one batch that share a filter (or have none): searched with one call."""

    __slots__ = ("states", "allowed", "rows")

    def __init__(self, allowed: Optional[np.ndarray], states: Optional[list[QueryState]] = None) -> None:
        self.states: list[QueryState] = [] if states is None else states
        self.allowed = allowed
        self.rows: Optional[np.ndarray] = None  # row positions of ``allowed`` in the artifact, computed once


_NO_FILTER = _Group(None)  # a single unfiltered query needs no group of its own


@stage_registry.register("retrieve")
class Retrieve(Stage):
    type = "retrieve"
    Params = RetrieveParams
    score_scale = COSINE
    fetches_hits = True

    @classmethod
    def final_k(cls, params: RetrieveParams) -> Optional[int]:
        return params.k

    def __init__(self, params: StageParams, ctx) -> None:
        super().__init__(params, ctx)
        self._docmap: Optional[tuple[object, DocMap]] = None
        self._seen = 0  # fan-out reports of a Ray-served index already looked at in this call

    def warm_up(self) -> None:
        self._docs(self.ctx.artifact(), self.ctx.store())

    def _docs(self, art, store) -> DocMap:
        if self._docmap is None or self._docmap[0] is not art:
            labels, doc_ids = store.chunk_column("doc_id")
            self._docmap = (art, DocMap(labels, doc_ids))
        return self._docmap[1]

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        art = self.ctx.artifact()
        store = self.ctx.store()
        docs = self._docs(art, store)
        source = ChunkSource(store)
        strategies: dict[str, int] = {}
        if len(batch) == 1 and batch[0].filter is None:  # the interactive case: keep it short
            self._run_one(art, docs, source, _NO_FILTER, batch[0], strategies)
            if self.params.fetch_text:
                source.fetch()
            usage.strategies = strategies
            self._shard_usage(art, usage, len(batch))
            return batch
        if all(s.filter is None for s in batch):
            groups = [_Group(None, batch)]
        else:
            by_filter: dict[Optional[str], _Group] = {}
            for s in batch:
                key = json.dumps(s.filter, sort_keys=True) if s.filter else None
                g = by_filter.get(key)
                if g is None:  # one store query per distinct filter in the batch
                    g = by_filter[key] = _Group(store.matching_labels(s.filter) if key is not None else None)
                g.states.append(s)
                if g.allowed is not None:
                    s.matches = int(len(g.allowed))
            groups = list(by_filter.values())
        for g in groups:
            self._run_group(art, docs, source, g, strategies)
        if self.params.fetch_text:
            source.fetch()
        usage.strategies = strategies
        self._shard_usage(art, usage, len(batch))
        return batch

    # ---- shards served by Ray actors (``index: {serve: {on: ray}}``) -----------------------
    def _mark_partial(self, art, states: list[QueryState]) -> None:
        """Queries a fan-out answered without every shard are flagged, never silently short."""
        reports = getattr(art.index, "reports", None)
        if reports is None:
            return
        fresh, self._seen = reports[self._seen:], len(reports)  # this search's fan-outs only
        missing = sorted({i for r in fresh for i in r.missing})
        if not missing:
            return
        shards = len(getattr(art.index, "actors", ())) or None
        for s in states:
            if s.partial is None:
                s.partial = {"missing_shards": [], "shards": shards}
            p = s.partial
            p["missing_shards"] = sorted(set(p["missing_shards"]) | set(missing))

    def _shard_usage(self, art, usage: UsageRecord, items: int) -> None:
        """Each shard actor's CPU-seconds (measured inside it) as a record of its own, priced by the runner
        on the resource of the node it ran on (``index.serve.nodes``; a shard moved by a restart gives one
        record per node)."""
        take = getattr(art.index, "take_reports", None)
        if take is None:
            return
        per: dict[tuple[int, str], UsageRecord] = {}
        serve = self.ctx.index_config.serve
        self._seen = 0
        for report in take():
            for c in report.calls:
                key = (c.shard, c.node or next((n for s, n in per if s == c.shard), ""))  # a failed call: its shard's node
                r = per.get(key)
                if r is None:
                    r = per[key] = UsageRecord(stage=f"{self.name}:shard-{c.shard}", resource=serve.resource_of(key[1], self.resource),
                                               items=items, calls=0, cpu_seconds=0.0, node=key[1] or None,
                                               notes={"node": key[1], "pid": c.pid})
                r.cpu_seconds = (r.cpu_seconds or 0.0) + c.cpu_seconds
                r.wall_seconds += c.wall_seconds
                r.retries += int(c.retried)
                r.failures += int(c.failed is not None)
                if c.node:
                    r.notes.update(pid=c.pid)
        usage.remote = [per[k] for k in sorted(per)]

    def _run_group(self, art, docs: DocMap, source: ChunkSource, g: _Group, strategies: dict[str, int]) -> None:
        if len(g.states) == 1:
            return self._run_one(art, docs, source, g, g.states[0], strategies)
        available = len(art.labels) if g.allowed is None else len(g.allowed)
        per_doc = self.params.per_document
        states = g.states
        ks = np.fromiter((s.k for s in states), dtype=np.int64, count=len(states))
        q_all = _query_matrix(states)
        pending = np.arange(len(states))
        mult = 4 if per_doc else 1
        while len(pending):
            kmax = int(ks[pending].max())
            fetch = min(kmax * mult, available)
            q = q_all if len(pending) == len(states) else q_all[pending]
            scores, labels, strategy = self._search(art, g, q, fetch)
            self._mark_partial(art, [states[i] for i in pending.tolist()])
            block = _rank(scores, labels, docs, ks[pending], kmax, per_doc, source)
            # A query whose candidates collapsed to fewer than k documents searches again, wider.
            done = np.ones(len(pending), dtype=bool) if not per_doc or fetch >= available else block.counts >= ks[pending]
            if isinstance(strategy, str):
                strategies[strategy] = strategies.get(strategy, 0) + int(done.sum())
            source.add(block.labels[done] if not done.all() else block.labels)
            for j in np.flatnonzero(done).tolist():
                s = states[pending[j]]
                s.set_ranked(block, j)
                st = strategy if isinstance(strategy, str) else strategy[j]
                s.strategy = st
                if not isinstance(strategy, str):
                    strategies[st] = strategies.get(st, 0) + 1
            pending = pending[~done]
            mult *= 4

    def _run_one(self, art, docs: DocMap, source: ChunkSource, g: _Group, s: QueryState, strategies: dict[str, int]) -> None:
        """One query: the same selection as ``_rank``, over Python lists (a handful of results
        costs less in a loop than in a dozen small numpy calls)."""
        available = len(art.labels) if g.allowed is None else len(g.allowed)
        per_doc, k = self.params.per_document, s.k
        vec = s.vector
        q = None
        mult = 4 if per_doc else 1
        while True:
            fetch = min(k * mult, available)
            if g.allowed is None:
                lbs, scs = art.index.search_one(vec, fetch) if fetch > 0 else ([], [])
                strategy = "index"
            else:
                q = _query_matrix(g.states) if q is None else q
                scores, labels, strategy = self._search(art, g, q, fetch)
                lbs, scs = labels[0].tolist(), scores[0].tolist()
            self._mark_partial(art, [s])
            ds = docs.ords_list(lbs)
            # The usual case: every result is a known chunk (and, per document, of a distinct
            # document): keep the first k as they are. Both checks run in C.
            if -1 not in ds and (not per_doc or len(set(ds)) == len(ds)):
                kept_l, kept_s, kept_d = lbs[:k], scs[:k], ds[:k]
                break
            kept_l = []
            kept_s = []
            kept_d = []
            seen: set[int] = set()
            for lb, sc, d in zip(lbs, scs, ds):
                if d < 0 or d in seen:
                    continue
                if per_doc:
                    seen.add(d)
                kept_l.append(lb)
                kept_s.append(sc)
                kept_d.append(d)
                if len(kept_l) >= k:
                    break
            # Candidates that collapsed to fewer than k documents: search again, wider.
            if not per_doc or len(kept_l) >= k or fetch >= available:
                break
            mult *= 4
        st = strategy if isinstance(strategy, str) else strategy[0]
        s.strategy = st
        strategies[st] = strategies.get(st, 0) + 1
        source.add(kept_l)
        s.set_ranked(RankedRow(kept_l, kept_s, kept_d, docs.names, source), 0)

    # ---- strategies ------------------------------------------------------------------------
    def _search(self, art, g: _Group, q: np.ndarray, k: int):
        """(scores, labels) of shape (len(q), k), and the strategy: one name, or one per query."""
        if g.allowed is None:
            scores, labels = art.index.search(q, k)
            return scores, labels, "index"
        n_match = len(g.allowed)
        if n_match == 0 or k == 0:
            return np.full((len(q), 0), -np.inf, np.float32), np.full((len(q), 0), -1, np.int64), "empty"
        selectivity = n_match / max(len(art.labels), 1)
        below = self.params.exact_below
        if n_match <= max(self.params.exact_max_matches, k) or selectivity < below or below >= 1.0:
            return (*self._exact(art, g, q, k), "exact")
        params = type(art.index).filtered_search_params(self.ctx.index_config, k, selectivity)
        scores, labels, exact_rows = art.index.search_filtered(q, k, params, g.allowed)
        # Both the index's own fallback (rows it scored exactly when its walk came up short) and
        # ours below are exact scans: report them as such, per query.
        fell_back = np.zeros(len(q), dtype=bool)
        fell_back[exact_rows] = True
        short = (labels < 0).any(axis=1)
        if short.any():
            idx = np.flatnonzero(short)
            scores[idx], labels[idx] = self._exact(art, g, q[idx], k)
            fell_back |= short
        return scores, labels, ["native+exact-fallback" if fb else "native" for fb in fell_back.tolist()]

    @staticmethod
    def _exact(art, g: _Group, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scan = getattr(art.index, "scan_allowed", None)
        if scan is not None:  # shards in Ray actors: each scans its own vectors
            return scan(q, k, g.allowed)
        if g.rows is None:
            g.rows = rows_for_labels(art.labels, g.allowed)
        return scan_rows(art.vectors, art.labels, q, k, g.rows)


def _rank(scores: np.ndarray, labels: np.ndarray, docs: DocMap, ks: np.ndarray, kmax: int, per_doc: bool,
          source: ChunkSource) -> Ranked:
    """Results whose chunk the store knows (per document, each document's best chunk), up to each row's k."""
    lb, sc, dd, counts = collapse(scores, labels, docs, ks, kmax, per_doc)
    return Ranked(lb, sc, dd, counts, docs.names, source)


def _query_matrix(states: list[QueryState]) -> np.ndarray:
    if len(states) == 1:
        return np.asarray(states[0].vector, dtype=np.float32).reshape(1, -1)
    return np.array([s.vector for s in states], dtype=np.float32)  # one copy; faster than vstack
