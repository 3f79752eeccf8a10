"""What the cache and cache_write stages of one pipeline share: the backend, an in-memory mirror, the learner."""

from __future__ import annotations

import random
import time
from typing import Any, Optional

from ragcost.cache.bound import ThresholdLearner
from ragcost.cache.entry import CacheEntry
from ragcost.cache.keys import digest, scope_key
from ragcost.cache.normalise import Normaliser
from ragcost.cache.semantic import SemanticIndex
from ragcost.records import QueryState


class CacheHandle:
    """What the cache and cache_write stages of one pipeline share: the backend, the vectors, the learner."""

    def __init__(self, params: Any, backend: Any, versions: dict[str, Any], verifier: Optional[Any]) -> None:
        self.params, self.backend, self.versions, self.verifier = params, backend, versions, verifier
        self.version = digest(versions)[:32]
        self.normalise = Normaliser(**params.normalise.model_dump())
        self.index = SemanticIndex()
        self.vocabulary: Optional[Any] = None  # corpus document frequencies for the meaning check (meaning.Vocabulary)
        self.words: Optional[Any] = None  # word vectors for synonyms in the meaning check (words.WordVectors)
        self.learner = ThresholdLearner(params.max_false_hit_rate, params.confidence, params.min_entry_evidence)
        self.rng = random.Random(params.seed)
        self.seen_until = 0.0
        self.refreshed_at = 0.0
        self.down = False  # the backend failed: every lookup misses until it answers again
        self.reported_bad: set[str] = set()  # bad entries already warned about (each is reported once)
        # An in-memory mirror of the live entries: a hit reads no database (p50 well under a millisecond).
        self.entries: dict[str, CacheEntry] = {}
        self.exact: dict[tuple[str, str], str] = {}
        self.touched: list[str] = []  # hits to count, and checks to store: written with the next refresh
        self.observed: list[tuple[str, float, bool]] = []

    def warm(self) -> None:
        """Rebuild the mirror, the semantic index and the evidence from what the backend holds."""
        self.refresh(force=True)
        for entry_id, sim, ok in self.backend.observations():
            self.learner.add(entry_id, sim, ok)

    def refresh(self, force: bool = False) -> None:
        """Hit counts out, other processes' new entries in; at most every ``refresh_s``."""
        now = time.time()
        if not force and now - self.refreshed_at < self.params.refresh_s:
            return
        self.refreshed_at = now
        self.flush()
        for e in self.backend.entries_since(self.seen_until, now):
            self.remember(e)
            self.seen_until = max(self.seen_until, e.created_at)
        self.report_bad()

    def report_bad(self) -> None:
        """One warning for the bad entries not reported yet: they are skipped, every other entry is served."""
        new = [i for i in getattr(self.backend, "bad", {}) if i not in self.reported_bad]
        if not new:
            return
        import warnings

        from ragcost.cache.backends import shown

        self.reported_bad.update(new)
        first = new[0]
        warnings.warn(f"cache {shown(self.backend.url)}: skipped {len(new)} bad entr{'y' if len(new) == 1 else 'ies'} "
                      f"({first}: {self.backend.bad[first]}{', ...' if len(new) > 1 else ''}); the others are served; "
                      "`ragcost cache prune PIPELINE` removes them", RuntimeWarning, stacklevel=3)

    def clear(self) -> int:
        """Remove every entry and observation, in the backend and in this process's mirror."""
        n = self.backend.clear()
        self.entries.clear()
        self.exact.clear()
        self.index = SemanticIndex()
        self.learner = ThresholdLearner(self.params.max_false_hit_rate, self.params.confidence, self.params.min_entry_evidence)
        self.touched, self.observed = [], []
        return n

    def observe(self, entry_id: str, similarity: float, correct: bool) -> None:
        """Learn from a check now; store it with the next refresh (a verified hit waits on no database write)."""
        self.learner.add(entry_id, similarity, correct)
        self.observed.append((entry_id, float(similarity), bool(correct)))

    def flush(self) -> None:
        """Hit counts and checks out to the backend, in one transaction each."""
        if self.touched:
            touched, self.touched = self.touched, []
            self.backend.touch(touched)
        if self.observed:
            observed, self.observed = self.observed, []
            self.backend.observe(observed)

    def remember(self, e: CacheEntry) -> None:
        self.entries[e.id] = e
        self.exact[(e.scope, e.key)] = e.id
        if e.vector is not None:
            self.index.add(e.scope, e.id, e.vector)

    def live(self, entry_id: Optional[str], now: float) -> Optional[CacheEntry]:
        e = self.entries.get(entry_id) if entry_id else None
        if e is not None and e.expires_at <= now:
            self.entries.pop(e.id, None)
            self.index.discard(e.id)
            return None
        return e

    def scope_of(self, s: QueryState) -> str:
        """The versions, k, filter and tenant, and the request's generation options (max_tokens, stop, sampling)
        when it sent any: an answer made under one request's limits is never served to a request with others.
        A request without options keeps the scope it always had, so entries written before stay reachable."""
        versions = {**self.versions, "k": s.k}
        if s.keep is not None:  # an explicit k a re-rank cuts to: answers over 3 results are not answers over 5
            versions["keep"] = s.keep
        if s.options:
            versions["generation_options"] = dict(s.options)
        return scope_key(versions, s.filter, s.tenant)
