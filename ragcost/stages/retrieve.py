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

from ragcost.cost.usage import UsageRecord
from ragcost.index.exact import exact_search, rows_for_labels
from ragcost.stages.base import Hit, QueryState, Stage, StageParams, stage_registry

# Calibrated with `python -m bench.filters` (100k x 384, 20 queries a bucket, hnswlib and faiss
# HNSW, 2 shared CPU cores): at 10% selectivity the exact scan of the matches (p95 ~90-130 ms under
# load) beat hnswlib's Python-filtered walk (200-350 ms) and tied faiss HNSW + IDSelector, whose
# recall on anti-correlated filters was already down to 0.94; at 30% the native walk was 2-3x
# faster than the scan. So scan below 15%; the numbers are in README "Benchmarks".
EXACT_BELOW = 0.15
EXACT_MAX_MATCHES = 2048


class RetrieveParams(StageParams):
    k: int = Field(10, ge=1, le=10_000, description="results per query (overridden by `ragcost query -k`)")
    per_document: bool = Field(True, description="at most one chunk per document (the best)")
    exact_below: float = Field(EXACT_BELOW, ge=0, le=1, description="selectivity under which filtered search scans the matches exactly")
    exact_max_matches: int = Field(EXACT_MAX_MATCHES, ge=0, description="always scan exactly when this few chunks match")


class _Group:
    """Queries of one batch that share a filter (or have none): searched with one call."""

    __slots__ = ("states", "allowed", "rows")

    def __init__(self, allowed: Optional[np.ndarray]) -> None:
        self.states: list[QueryState] = []
        self.allowed = allowed
        self.rows: Optional[np.ndarray] = None  # row positions of ``allowed`` in the artifact, computed once


@stage_registry.register("retrieve")
class Retrieve(Stage):
    type = "retrieve"
    Params = RetrieveParams

    def warm_up(self) -> None:
        self.pipeline.artifact()

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        art = self.pipeline.artifact()
        store = self.pipeline.store()
        groups: dict[Optional[str], _Group] = {}
        for s in batch:
            key = json.dumps(s.filter, sort_keys=True) if s.filter else None
            g = groups.get(key)
            if g is None:  # one store query per distinct filter in the batch
                g = groups[key] = _Group(store.matching_labels(s.filter) if key is not None else None)
            g.states.append(s)
            if g.allowed is not None:
                s.notes["matches"] = int(len(g.allowed))
        strategies: dict[str, int] = {}
        for g in groups.values():
            self._run_group(art, store, g)
            for s in g.states:
                strategies[s.notes["strategy"]] = strategies.get(s.notes["strategy"], 0) + 1
        usage.notes["strategies"] = strategies
        return batch

    def _run_group(self, art, store, g: _Group) -> None:
        available = len(art.labels) if g.allowed is None else len(g.allowed)
        mult = 4 if self.params.per_document else 1
        pending = g.states
        while pending:
            fetch = min(max(s.k for s in pending) * mult, available)
            cands = self._search(art, g, pending, fetch)
            self._attach(store, pending, *cands)
            # A query whose candidates collapsed to fewer than k documents searches again, wider.
            if not self.params.per_document or fetch >= available:
                break
            pending = [s for s in pending if len(s.hits) < s.k]
            mult *= 4

    # ---- strategies ------------------------------------------------------------------------
    def _search(self, art, g: _Group, states: list[QueryState], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, labels) of shape (len(states), k); sets each state's strategy note."""
        q = _query_matrix(states)
        if g.allowed is None:
            scores, labels = art.index.search(q, k)
            return self._noted(states, "index", scores, labels)
        n_match = len(g.allowed)
        if n_match == 0 or k == 0:
            return self._noted(states, "empty", np.full((len(states), 0), -np.inf, np.float32), np.full((len(states), 0), -1, np.int64))
        selectivity = n_match / max(len(art.labels), 1)
        if n_match <= max(self.params.exact_max_matches, k) or selectivity < self.params.exact_below:
            return self._noted(states, "exact", *self._exact(art, g, q, k))
        params = _raised_search_params(self.pipeline.index_config, k, selectivity)
        scores, labels = art.index.search(q, k, params=params, allowed=g.allowed)
        # Both the index's own fallback (hnswlib/faiss HNSW rescoring when the walk came up short)
        # and ours below are exact scans: report them as such, per query.
        fell_back = np.zeros(len(states), dtype=bool)
        if getattr(art.index, "last_search_fallback", False):
            rows = getattr(art.index, "last_fallback_rows", None)
            fell_back[slice(None) if rows is None else rows] = True
        short = (labels < 0).any(axis=1)
        if short.any():
            idx = np.flatnonzero(short)
            scores[idx], labels[idx] = self._exact(art, g, q[idx], k)
            fell_back |= short
        for s, fb in zip(states, fell_back.tolist()):
            s.notes["strategy"] = "native+exact-fallback" if fb else "native"
        return scores, labels

    @staticmethod
    def _noted(states: list[QueryState], strategy: str, scores: np.ndarray, labels: np.ndarray):
        for s in states:
            s.notes["strategy"] = strategy
        return scores, labels

    @staticmethod
    def _exact(art, g: _Group, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if g.rows is None:
            g.rows = rows_for_labels(art.labels, g.allowed)
        return exact_search(art.vectors, art.labels, q, k, rows=g.rows)

    # ---- results ---------------------------------------------------------------------------
    def _attach(self, store, states: list[QueryState], scores: np.ndarray, labels: np.ndarray) -> None:
        found = labels[labels >= 0]
        wanted = np.unique(found).tolist() if len(found) else []
        # One store call for the whole batch; each chunk becomes a Hit's fields once, however many
        # queries it comes back for.
        fields = {
            r["label"]: (r["doc_id"], r.get("title") or "", r["text"], r.get("chunk_no", 0), r.get("metadata") or {})
            for r in (store.chunks(wanted) if wanted else ())
        }
        get = fields.get
        if not self.params.per_document:
            for s, sc, lb in zip(states, scores.tolist(), labels.tolist()):
                s.hits = [Hit(label, f[0], score, f[1], f[2], f[3], f[4])
                          for score, label in zip(sc, lb) if (f := get(label)) is not None][: s.k]
            return
        for s, sc, lb in zip(states, scores.tolist(), labels.tolist()):
            hits: list[Hit] = []
            seen: set[str] = set()
            k = s.k
            for score, label in zip(sc, lb):
                f = get(label)
                if f is None or f[0] in seen:
                    continue
                seen.add(f[0])
                hits.append(Hit(label, f[0], score, f[1], f[2], f[3], f[4]))
                if len(hits) >= k:
                    break
            s.hits = hits


def _query_matrix(states: list[QueryState]) -> np.ndarray:
    if len(states) == 1:
        return np.asarray(states[0].vector, dtype=np.float32).reshape(1, -1)
    return np.vstack([s.vector for s in states]).astype(np.float32, copy=False)


def _raised_search_params(cfg, k: int, selectivity: float) -> Optional[dict]:
    """Native filtered search visits ~1/selectivity more candidates to find k allowed ones."""
    # 2/selectivity, not 1/: faiss HNSW's bounded candidate list lost recall on anti-correlated
    # filters at 30% with ef x 1/selectivity (bench.filters: 0.93).
    boost = min(2.0 / max(selectivity, 1e-6), 32.0)
    if cfg.kind == "hnsw":
        ef = int(cfg.search.get("ef", 64))
        return {"ef": int(min(max(ef, k) * boost, 4096))}
    if cfg.kind in ("ivf_flat", "ivf_pq"):
        nprobe = int(cfg.search.get("nprobe", 16))
        return {"nprobe": int(nprobe * boost)}
    return None
