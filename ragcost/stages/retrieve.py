"""Retrieve with metadata filters, choosing a strategy by selectivity, and saying which it used.

- no filter: the index's own top-k (one batched search call);
- few matches (selectivity under ``exact_below``, or no more than ``exact_max_matches``):
  exact search over just the matching vectors;
- otherwise the index's native filtered search, with ef/nprobe raised as selectivity drops,
  falling back to exact whenever it returns fewer than k.
Post-filtering a plain top-k is never used: it silently loses recall.
"""

from __future__ import annotations

import json
from typing import Optional

import numpy as np
from pydantic import Field

from ragcost.cost.usage import UsageRecord
from ragcost.stages.base import Hit, QueryState, Stage, StageParams, stage_registry


class RetrieveParams(StageParams):
    k: int = Field(10, ge=1, le=10_000, description="results per query (overridden by `ragcost query -k`)")
    per_document: bool = Field(True, description="at most one chunk per document (the best)")
    exact_below: float = Field(0.02, ge=0, le=1, description="selectivity under which filtered search scans the matches exactly")
    exact_max_matches: int = Field(2048, ge=0, description="always scan exactly when this few chunks match")


@stage_registry.register("retrieve")
class Retrieve(Stage):
    type = "retrieve"
    Params = RetrieveParams

    def warm_up(self) -> None:
        self.pipeline.artifact()

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        art = self.pipeline.artifact()
        store = self.pipeline.store()
        strategies: dict[str, int] = {}
        allowed_by_filter: dict[str, np.ndarray] = {}
        for s in batch:
            if s.filter:
                key = json.dumps(s.filter, sort_keys=True)
                if key not in allowed_by_filter:  # one store query per distinct filter in the batch
                    allowed_by_filter[key] = store.matching_labels(s.filter)
                s.notes["_allowed"] = allowed_by_filter[key]
                s.notes["matches"] = int(len(allowed_by_filter[key]))
        mult = 4 if self.params.per_document else 1
        pending = batch
        while pending:
            fetch = {id(s): s.k * mult for s in pending}
            self._search(art, pending, fetch)
            self._attach(store, pending)
            # A query whose candidates collapsed to fewer than k documents searches again, wider.
            pending = [s for s in pending if self._wants_more(art, s, fetch[id(s)])]
            mult *= 4
        for s in batch:
            s.notes.pop("_allowed", None)
            s.notes.pop("_cand", None)
            strategies[s.notes["strategy"]] = strategies.get(s.notes["strategy"], 0) + 1
        usage.notes["strategies"] = strategies
        return batch

    def _wants_more(self, art, s: QueryState, fetch: int) -> bool:
        if not self.params.per_document or len(s.hits) >= s.k:
            return False
        available = len(s.notes["_allowed"]) if "_allowed" in s.notes else len(art.labels)
        return fetch < available

    # ---- strategies ------------------------------------------------------------------------
    def _search(self, art, states: list[QueryState], fetch: dict[int, int]) -> None:
        plain = [s for s in states if "_allowed" not in s.notes]
        if plain:
            k = min(max(fetch[id(s)] for s in plain), len(art.labels))
            q = np.vstack([s.vector for s in plain]).astype(np.float32, copy=False)
            scores, labels = art.index.search(q, k)
            for s, sc, lb in zip(plain, scores, labels):
                s.notes["_cand"] = (sc, lb)
                s.notes["strategy"] = "index"
        for s in states:
            if "_allowed" in s.notes:
                s.notes["strategy"] = self._search_filtered(art, s, s.notes["_allowed"], fetch[id(s)])

    def _search_filtered(self, art, s: QueryState, allowed: np.ndarray, fetch: int) -> str:
        n_match = len(allowed)
        if n_match == 0:
            s.notes["_cand"] = (np.empty(0, np.float32), np.empty(0, np.int64))
            return "empty"
        q = s.vector[None, :].astype(np.float32, copy=False)
        fetch = min(fetch, n_match)
        selectivity = n_match / max(len(art.labels), 1)
        if n_match <= max(self.params.exact_max_matches, fetch) or selectivity < self.params.exact_below:
            s.notes["_cand"] = self._exact(art, q, fetch, allowed)
            return "exact"
        params = _raised_search_params(self.pipeline.index_config, fetch, selectivity)
        scores, labels = art.index.search(q, fetch, params=params, allowed=allowed)
        if (labels[0] < 0).any():
            s.notes["_cand"] = self._exact(art, q, fetch, allowed)
            return "native+exact-fallback"
        s.notes["_cand"] = (scores[0], labels[0])
        return "native"

    @staticmethod
    def _exact(art, q: np.ndarray, k: int, allowed: np.ndarray):
        from ragcost.index.exact import exact_search, rows_for_labels

        rows = rows_for_labels(art.labels, allowed)
        scores, labels = exact_search(art.vectors, art.labels, q, k, rows=rows)
        return scores[0], labels[0]

    # ---- results ---------------------------------------------------------------------------
    def _attach(self, store, batch: list[QueryState]) -> None:
        wanted: set[int] = set()
        for s in batch:
            _, lb = s.notes["_cand"]
            wanted.update(int(x) for x in lb if x >= 0)
        rows = {r["label"]: r for r in store.chunks(sorted(wanted))} if wanted else {}
        for s in batch:
            sc, lb = s.notes["_cand"]
            hits: list[Hit] = []
            seen: set[str] = set()
            for score, label in zip(sc, lb):
                r = rows.get(int(label))
                if r is None or (self.params.per_document and r["doc_id"] in seen):
                    continue
                seen.add(r["doc_id"])
                hits.append(Hit(int(label), r["doc_id"], float(score), r.get("title") or "", r["text"], r.get("chunk_no", 0), r.get("metadata") or {}))
                if len(hits) >= s.k:
                    break
            s.hits = hits


def _raised_search_params(cfg, k: int, selectivity: float) -> Optional[dict]:
    """Native filtered search visits ~1/selectivity more candidates to find k allowed ones."""
    boost = min(1.0 / max(selectivity, 1e-6), 16.0)
    if cfg.kind == "hnsw":
        ef = int(cfg.search.get("ef", 64))
        return {"ef": int(min(max(ef, k) * boost, 4096))}
    if cfg.kind in ("ivf_flat", "ivf_pq"):
        nprobe = int(cfg.search.get("nprobe", 16))
        return {"nprobe": int(nprobe * boost)}
    return None
