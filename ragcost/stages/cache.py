"""The answer cache: ``cache`` (before retrieve/generate) answers repeats and paraphrases; ``cache_write`` stores answers.

```yaml
stages:
  - {type: guard, on: query, checks: [pii]}   # the cache sees (and stores) redacted text
  - {type: cache, max_false_hit_rate: 0.01, confidence: 0.95}
  - {type: retrieve, k: 20}
  - {type: rerank, backend: rescore, top_n: 5}
  - {type: generate, backend: extractive}
  - {type: cache_write}                       # after generate: it sees the final answer
```

Why two stages: a stage sees only its own call, and the runner skips finished queries, so the
stage that looks up cannot see the answer a miss goes on to get. ``cache_write`` (same cache, by
its stage name) stores it after generation and judges, free of charge, whether the nearest cached
answer would have been right: that is most of the evidence the false-hit bound learns from.

A semantic candidate is served only when it is the same question: the two texts may differ in no
negation, number, operator, identifier, antonym or word order (a fronted clause may move), and
the corpus-IDF weight of the other words they differ in, less pairs that are near-synonyms in the
embedder's own space (``min_word_similarity``), stays within ``max_differing_weight``
(:mod:`ragcost.cache.meaning`). Then its answer basis is checked like with like
(:mod:`ragcost.stages.cache_verify`): the stages between the cache and generate that shaped the
stored hits (retrieve, rerank) run again on the new query, unless the learned bound trusts it.

A hit finishes the query with the cached answer, citations, hits (title, text, metadata) and
retrieval strategy, and sets ``s.cache`` (``{"tier": "exact"|"semantic", "entry": id,
"similarity": x, "verified": bool}``). A miss leaves ``s.cache`` None and says why in
``s.cache_trip``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
from pydantic import Field, field_validator

from ragcost.cache import CacheEntry, exact_key, open_backend
from ragcost.cache.backends import shown
from ragcost.urls import without_secrets
from ragcost.cache.basis import same_basis
from ragcost.cache.handle import CacheHandle
from ragcost.config.base import Strict
from ragcost.errors import ConfigError, StoreError
from ragcost.records import Hit, QueryState, UsageRecord
from ragcost.stages.base import Stage, StageParams, stage_registry
from ragcost.stages.cache_verify import build_verifier

# Chosen on the calibration half of bench/data/cache_labelled.jsonl (python -m bench.cache --calibrate):
# the most paraphrase hits with no labelled near-miss or other question served; among ties the higher
# floor, then the most the words may differ (the larger weight, the lower synonym floor). 1.0 lets differ
# only words in more than 58% of the corpus's chunks; every synonym floor from 0.6 down to the grid's 0.5
# ties (315 hits, 0 false), 0.65 and up lose two. Above 1 no word is taken for a synonym.
# The synonym floor is then raised to 0.8 by the tuning half of the labelled pairs
# (bench/data/cache_pairs_tune.jsonl): "in rats" / "in mice" was served at 0.5, their words 0.783 alike in the
# embedder's space (men/women 0.72, insulin/glucose 0.67: co-hyponyms are near in it, as synonyms are).
MAX_DIFFERING_WEIGHT = 1.0
MIN_SIMILARITY = 0.6
MIN_WORD_SIMILARITY = 0.8
# Stage params that never change an answer: labels, prices, concurrency and deadlines.
COSMETIC = frozenset({"name", "resource", "label", "concurrency", "batch_window_ms", "timeout_s", "connect_timeout_s",
                      "read_timeout_s", "retry", "api_key_env", "stream", "continuous_usage", "fetch_text"})
CACHE_TYPES = ("cache", "cache_write")
VOCABULARY_FORMAT = 2  # 2: the corpus's word forms too (typo correction)


class NormaliseParams(Strict):
    nfkc: bool = True
    whitespace: bool = Field(True, description="collapse runs of whitespace")
    casefold: bool = True
    trailing_punctuation: bool = Field(True, description="drop trailing . ? ! and the like")


class CacheParams(StageParams):
    backend: str = Field("sql", description="sql (the pipeline's store: DuckDB or PostgreSQL) or redis")
    url: Optional[str] = Field(None, description="backend URL; default: the pipeline's store (sql), redis://127.0.0.1:6379/0 (redis)")
    tiers: list[str] = Field(default_factory=lambda: ["exact", "semantic"], description="exact and/or semantic")
    normalise: NormaliseParams = Field(default_factory=NormaliseParams)
    max_false_hit_rate: float = Field(0.01, description="bound on wrong semantic hits, in (0, 1)")
    confidence: float = Field(0.95, description="confidence of that bound, in (0, 1)")
    min_similarity: float = Field(MIN_SIMILARITY, ge=-1, le=1, description="semantic candidates below this cosine always miss")
    min_overlap: float = Field(0.8, gt=0, le=1, description="share of the top-k documents a correct hit must share with a fresh run")
    verify_share: float = Field(0.1, ge=0, le=1, description="share of trusted semantic hits re-checked by a fresh retrieval")
    min_entry_evidence: int = Field(20, ge=1, description="observations an entry needs before it gets its own threshold")
    ttl_s: float = Field(7 * 86400, gt=0, description="seconds an entry lives")
    max_bytes: int = Field(256 * 2**20, gt=0, description="size limit; least value (hits × cost saved) is evicted first")
    seed: int = Field(0, description="seed of the verification sampling")
    refresh_s: float = Field(1.0, ge=0, description="read entries other processes wrote at most this often (0: every batch)")
    verify_alternates: int = Field(4, ge=0, description="when the nearest cached query fails its check, up to this many next ones "
                                   "(above min_similarity) are checked against the same fresh retrieval, at no extra call")
    exact_min_similarity: float = Field(0.9999, ge=-1, le=1, description="an exact-text hit whose stored embedding differs more than this is re-checked like a semantic one")
    meaning_check: bool = Field(True, description="refuse a semantic candidate whose question differs in meaning "
                                "(negation, numbers, operators, identifiers, antonyms, weighty words); false: similarity and the basis check only")
    max_differing_weight: float = Field(MAX_DIFFERING_WEIGHT, ge=0, description="the most corpus-IDF weight the content words two "
                                        "questions differ in may carry for one to be served the other's answer (0: only stopwords may differ)")
    min_word_similarity: float = Field(MIN_WORD_SIMILARITY, ge=-1, le=2, description="two differing words whose vectors "
                                       "(each word embedded alone by the pipeline's embedder) are this similar count as "
                                       "synonyms and weigh nothing (above 1: off)")
    correct_typos: bool = Field(True, description="before the semantic tier, correct misspelt words to the corpus's own "
                                "spelling (a word the corpus never uses, one edit from one it clearly does) and embed the "
                                "corrected question again")

    @field_validator("max_false_hit_rate", "confidence")
    @classmethod
    def _open_unit(cls, v: float, info) -> float:
        if not 0 < v < 1:
            raise ValueError(f"{info.field_name} must be in (0, 1), got {v}; e.g. max_false_hit_rate: 0.01, confidence: 0.95")
        return v

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        from ragcost.cache.backends import cache_backend_registry

        if v != "redis" and v not in cache_backend_registry:  # redis registers on first use (optional extra)
            raise ValueError(f"unknown cache backend {v!r}; installed: sql, redis")
        return v

    @field_validator("tiers")
    @classmethod
    def _tiers(cls, v: list[str]) -> list[str]:
        bad = [t for t in v if t not in ("exact", "semantic")]
        if bad or not v:
            raise ValueError(f"tiers {v!r}: use one or both of exact, semantic")
        return v


def pipeline_stages(path: Path) -> list[dict[str, Any]]:
    """The pipeline file's stages, each validated by its class (so defaults count too), as JSON: what a loaded
    pipeline's ``stage_params()`` gives, from the file alone."""
    from ragcost.config.loader import read_yaml

    raw = json.loads(json.dumps(read_yaml(path) or {}, default=str))
    out = []
    for st in raw.get("stages") or []:
        params = {k: v for k, v in st.items() if k != "type"}
        cls = stage_registry.get(st["type"])
        out.append({"type": st["type"], **cls.Params.model_validate(params).model_dump(mode="json")})
    return out


def _file_stamp(base: Path, value: Any) -> Optional[list]:
    """A local model or tokenizer path's files (name, size, mtime): a changed file changes the key."""
    if not isinstance(value, str) or not value or len(value) > 1024:
        return None
    p = base / value if not Path(value).is_absolute() else Path(value)
    try:
        if p.is_file():
            st = p.stat()
            return [[p.name, st.st_size, st.st_mtime_ns]]
        if p.is_dir():
            return sorted([str(f.relative_to(p)), f.stat().st_size, f.stat().st_mtime_ns] for f in p.rglob("*") if f.is_file())
    except OSError:
        return None
    return None


def versions_of(ctx, stages: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything that makes an answer, but the query: model bytes, index build and corpus, the answering stages."""
    answering = []
    files: dict[str, Any] = {}
    for st in stages:
        if st["type"] in CACHE_TYPES:
            continue
        answering.append({k: v for k, v in st.items() if k not in COSMETIC})
        for k in ("model", "tokenizer"):
            stamp = _file_stamp(ctx.base, st.get(k))
            if stamp is not None:
                files[f"{st['type']}.{k}"] = stamp
    return {"format": 1, "embedder": ctx.embedder.fingerprint(), "index": ctx.artifact().manifest.fingerprint,
            "stages": answering, "files": files}


def _vocabulary(ctx, index_fingerprint: Any):
    """The corpus's document frequencies (what a differing word weighs), kept beside the index per corpus revision."""
    from ragcost.cache.keys import digest
    from ragcost.cache.meaning import Vocabulary

    tag = digest(index_fingerprint)[:16]
    path = Path(ctx.index_dir) / "cache-vocabulary.json"
    try:
        raw = json.loads(path.read_text())
        if raw.get("index") == tag and raw.get("format") == VOCABULARY_FORMAT:
            return Vocabulary.from_json(raw)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # absent or unreadable: count again
    _, texts = ctx.store().chunk_column("text")
    vocab = Vocabulary.build(texts)
    try:
        from ragcost.atomic import write_files

        body = json.dumps({"index": tag, "format": VOCABULARY_FORMAT, **vocab.to_json()}, separators=(",", ":"))
        write_files(path.parent, {path.name: lambda p: p.write_text(body)})
    except OSError:
        pass  # a read-only index folder: count again next time
    return vocab


def _backend_url(params: CacheParams, ctx) -> str:
    if params.url:
        return params.url
    if params.backend == "redis":
        return "redis://127.0.0.1:6379/0"
    url = getattr(ctx.store(), "url", None)
    if not url:
        raise ConfigError(f"{ctx.path}: cache: the pipeline's store has no SQL URL; set url: on the cache stage")
    return url


@stage_registry.register("cache")
class Cache(Stage):
    type = "cache"
    Params = CacheParams
    placement = "before-generate"
    remembers_queries = True
    optional = True
    eval_skips = "a cache's hits depend on repeated traffic eval does not replay"

    def warm_up(self) -> None:
        if getattr(self, "handle", None) is not None:
            return
        stages = self.ctx.stage_params()
        mine = [i for i, st in enumerate(stages) if st["type"] == "cache" and (st.get("name") or "cache") == self.name]
        writes = [i for i, st in enumerate(stages) if st["type"] == "cache_write" and st.get("cache", "cache") == self.name]
        if not writes or (mine and writes[0] < mine[0]):
            raise ConfigError(f"{self.ctx.path}: stage {self.name!r}: no cache_write stage after it, so nothing would "
                              f"ever be cached; add {{type: cache_write, cache: {self.name}}} after generate")
        from ragcost.cache.backends import cache_backend_registry

        if self.params.backend not in cache_backend_registry:
            import ragcost.cache.redis_backend  # noqa: F401  (registers "redis"; needs the [redis] extra)
        name = getattr(self.ctx.store(), "collection", None) or Path(self.ctx.path).stem
        url = _backend_url(self.params, self.ctx)
        backend = open_backend(self.params.backend, url, name)
        versions = versions_of(self.ctx, stages)
        handle = CacheHandle(self.params, backend, versions, build_verifier(self.ctx, stages, self.name))
        if self.params.meaning_check and "semantic" in self.params.tiers:
            handle.vocabulary = _vocabulary(self.ctx, versions["index"])
            if self.params.min_word_similarity <= 1:
                from ragcost.cache.words import WordVectors

                handle.words = WordVectors(self.ctx.embedder.embed)
        safely(handle, lambda b: handle.warm())  # unreachable: one warning with the URL, then misses
        self.ctx.shared()[f"cache:{self.name}"] = handle
        self.handle = handle
        # The ledger counts these stages' dollars as the cache's own cost (ragcost report).
        self.write_stages = [st.get("name") or st["type"] for i, st in enumerate(stages) if i in writes]

    def admin_backend(self, store_url: str, collection: str) -> Optional[Any]:
        """The backend alone, for ``ragcost cache stats|clear|prune``: nothing is warmed, and nothing is created.

        None when the cache lives in a DuckDB file that does not exist (there is nothing to show or
        remove). An unreachable backend is one :class:`StoreError` naming its URL and the fix.
        """
        from ragcost.cache.backends import cache_backend_registry, store_exists

        if self.params.backend not in cache_backend_registry:
            import ragcost.cache.redis_backend  # noqa: F401
        url = self.params.url or ("redis://127.0.0.1:6379/0" if self.params.backend == "redis" else store_url)
        if not store_exists(url):
            return None
        try:
            backend = open_backend(self.params.backend, url, collection)
            getattr(backend, "ping", lambda: None)()
        except StoreError as e:
            from ragcost.store.sql_errors import held_message, is_locked

            orig = getattr(e, "orig", None)
            if orig is not None and is_locked(orig):  # DuckDB's lock text names only an executable and a PID
                raise StoreError(held_message(url, orig, "cache store")) from None
            raise
        except Exception as e:  # noqa: BLE001 - the server is down or refuses us: one line, never a traceback
            raise StoreError(f"cache {shown(url)}: cannot reach it ({type(e).__name__}: "
                             f"{without_secrets(str(e).splitlines()[0], url) if str(e) else ''}); start the server, or set url: on the "
                             f"cache stage {self.name!r} of {self.ctx.path}") from None
        return backend

    def live_version(self) -> str:
        """The version digest entries made now carry (``prune`` drops entries of others)."""
        from ragcost.cache.keys import digest

        return digest(versions_of(self.ctx, self.ctx.stage_params()))[:32]

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        h = self.handle
        counts = {"exact": 0, "semantic": 0, "miss": 0, "refused": 0, "verified": 0, "sampled": 0, "verified_wrong": 0,
                  "alternates": 0, "verify_seconds": 0.0}
        now = time.time()
        if not h.down or now - h.refreshed_at >= h.params.refresh_s:  # down: probe again at most every refresh_s
            safely(h, lambda b: h.refresh(force=h.down))
        to_verify: list[tuple[QueryState, CacheEntry, float, bool]] = []
        self._lookups: dict[int, tuple[str, Optional[np.ndarray]]] = {}  # this batch's corrected questions
        self._full: dict[int, Optional[np.ndarray]] = {}  # and their full-dimension vectors, when corrected
        if h.down:  # the backend is unreachable: the mirror cannot be confirmed, so every query misses
            counts["miss"] = len(batch)
            usage.notes["cache"] = {**counts, "backend_down": True}
            return batch
        for s in batch:
            scope = h.scope_of(s)
            text = h.normalise(s.text)
            s.cache_trip = {"scope": scope, "key": exact_key(scope, text), "text": text, "question": s.text,
                            "stage": self.name, "write_stages": getattr(self, "write_stages", [])}
            cand = None
            if "exact" in h.params.tiers:
                e = h.live(h.exact.get((scope, s.cache_trip["key"])), now)
                sim = _cosine(e.vector, s.vector) if e is not None else None
                if e is not None and (sim is None or sim >= h.params.exact_min_similarity):
                    self._serve(s, e, "exact", 1.0, False)
                    counts["exact"] += 1
                    continue
                if e is not None:  # same text once normalised, but it embeds differently: check it
                    cand = (e, sim)
            if cand is None and "semantic" in h.params.tiers:
                cand = self._candidate(s, scope, now)
            elif cand is not None and not self._same_question(s, cand[0]):
                cand = None
            if cand is None:
                counts["miss"] += 1
                counts["refused"] += "refused" in s.cache_trip
                continue
            entry, sim = cand
            s.cache_trip["candidate"] = {"entry": entry.id, "similarity": sim}
            if sim < h.params.min_similarity:
                counts["miss"] += 1
            elif (trusted := h.learner.trusted(entry.id, sim)) and h.rng.random() >= h.params.verify_share:
                self._serve(s, entry, "semantic", sim, False)
                counts["semantic"] += 1
            elif h.verifier is not None:  # thin evidence, or a sampled check of a trusted hit: verify, or miss
                to_verify.append((s, entry, sim, trusted))
            else:
                counts["miss"] += 1
        if to_verify:
            self._verify(to_verify, counts)
        usage.notes["cache"] = counts
        return batch

    def _asked(self, s: QueryState) -> tuple[str, Optional[np.ndarray]]:
        """The question the semantic tier compares, and its vector: the query with misspelt words corrected to the
        corpus's own spelling (``gloabl`` -> ``global``), embedded again when a word changed; else as asked."""
        got = self._lookups.get(id(s))
        if got is not None:
            return got
        h = self.handle
        vocab = getattr(h, "vocabulary", None)
        text, vector = s.text, s.vector
        if h.params.correct_typos and vocab is not None and vector is not None:
            fixed, fixes = vocab.correct(s.text)
            if fixes:
                from ragcost.embed.reduce import query_vectors

                vecs, full = query_vectors(self.ctx.embedder, [fixed], self.ctx.dim)
                text, vector = fixed, vecs[0]
                self._full[id(s)] = full[0] if len(vector) < full.shape[1] else None
                s.cache_trip["corrected"] = [list(f) for f in fixes]
        self._lookups[id(s)] = (text, vector)
        return text, vector

    def _candidate(self, s: QueryState, scope: str, now: float) -> Optional[tuple[CacheEntry, float]]:
        """The most similar cached question that is the same question (the meaning check), if any.

        The nearest may be a near-miss of the query ("... not executed?"), so up to
        ``verify_alternates`` more above ``min_similarity`` are tried; a refusal is noted with its family.
        """
        h = self.handle
        _, vector = self._asked(s)
        if vector is None:
            return None
        for n, (entry_id, sim) in enumerate(h.index.ranked(scope, vector, h.params.verify_alternates + 1)):
            if n and sim < h.params.min_similarity:
                break
            entry = h.live(entry_id, now)
            if entry is None:
                h.index.discard(entry_id)
                continue
            if n == 0 and sim < h.params.min_similarity:
                return entry, sim  # below the floor: a miss either way, noted with its similarity
            if self._same_question(s, entry):
                return entry, sim
        return None

    def _same_question(self, s: QueryState, e: CacheEntry) -> bool:
        """The meaning check: the words in which the two questions differ carry no meaning (notes say which did)."""
        h = self.handle
        vocab = getattr(h, "vocabulary", None)
        if not h.params.meaning_check or vocab is None:
            return True
        from ragcost.cache.meaning import compare

        stored = e.question if e.question is not None else e.text
        text, _ = self._asked(s)
        asked = text if e.question is not None else h.normalise(text)
        words = getattr(h, "words", None)
        d = compare(stored, asked, vocab, h.params.max_differing_weight, words and words.similar, h.params.min_word_similarity)
        if d.same:
            return True
        s.cache_trip.setdefault("refused", []).append({"entry": e.id, **d.to_json()})
        return False

    def _verify(self, items: list[tuple[QueryState, CacheEntry, float, bool]], counts: dict[str, Any]) -> None:
        """Re-run retrieval for these candidates (one batched call); serve those whose basis holds."""
        h = self.handle
        # The question as corrected (a typo fixed) is the one checked: its retrieval is the basis a hit must share.
        fresh = [QueryState(text=self._asked(s)[0], id=s.id, k=s.k, filter=s.filter, vector=self._asked(s)[1], tenant=s.tenant,
                            keep=s.keep) for s, *_ in items]
        for f, (s, *_) in zip(fresh, items):
            f.full_vector = self._full[id(s)] if id(s) in self._full else s.full_vector
        t0 = time.perf_counter()
        h.verifier.run(fresh, UsageRecord(stage="cache-verify", resource=self.resource, items=len(fresh)))
        counts["verify_seconds"] += time.perf_counter() - t0
        for (s, entry, sim, sampled), f in zip(items, fresh):
            ok = same_basis([x["doc_id"] for x in entry.hits], entry.citations, [x.doc_id for x in f.hits], h.params.min_overlap)
            counts["verified"] += 1
            counts["sampled"] += sampled
            self._observe(entry.id, sim, ok)
            # sampled: a trusted hit that would have been served unverified -- an unbiased check of those
            s.cache_trip["candidate"].update(judged=True, sampled=sampled, correct=ok)
            if ok:
                self._serve(s, entry, "semantic", sim, True)
                counts["semantic"] += 1
                continue
            counts["verified_wrong"] += 1
            alt = self._alternate(s, entry.id, [x.doc_id for x in f.hits])
            if alt is None:
                counts["miss"] += 1
                continue
            self._serve(s, alt[0], "semantic", alt[1], True)  # verified against the same fresh retrieval
            s.cache["alternate"] = True
            counts["semantic"] += 1
            counts["alternates"] += 1

    def _alternate(self, s: QueryState, tried: str, fresh_docs: list[str]) -> Optional[tuple[CacheEntry, float]]:
        """The most similar other cached query whose answer basis the fresh retrieval confirms, if any.

        Not observed by the learner: its evidence is about the nearest candidate, the one a trusted
        hit would serve unverified.
        """
        h = self.handle
        _, vector = self._asked(s)
        if not h.params.verify_alternates or vector is None:
            return None
        now = time.time()
        for entry_id, sim in h.index.ranked(s.cache_trip["scope"], vector, h.params.verify_alternates + 1):
            if entry_id == tried:
                continue
            if sim < h.params.min_similarity:
                break
            e = h.live(entry_id, now)
            if e is not None and same_basis([x["doc_id"] for x in e.hits], e.citations, fresh_docs, h.params.min_overlap) \
                    and self._same_question(s, e):
                return e, sim
        return None

    def _observe(self, entry_id: str, sim: float, ok: bool) -> None:
        self.handle.observe(entry_id, sim, ok)

    def close(self) -> None:
        h = getattr(self, "handle", None)
        if h is not None and not h.down:
            safely(h, lambda b: h.flush())

    def _serve(self, s: QueryState, e: CacheEntry, tier: str, sim: float, verified: bool) -> None:
        s.hits = [Hit(int(x.get("label", -1)), x["doc_id"], float(x.get("score", 0.0)), title=x.get("title") or "",
                      text=x.get("text") or "", chunk_no=int(x.get("chunk_no") or 0), metadata=dict(x.get("metadata") or {}))
                  for x in e.hits]
        if e.strategy is not None:
            s.strategy = e.strategy
        s.cache = {"tier": tier, "entry": e.id, "similarity": round(sim, 6), "verified": verified, "origin": e.origin}
        s.finish(self.name, answer=e.answer, citations=e.citations)
        e.hit_count += 1
        self.handle.touched.append(e.id)  # written with the next refresh, in one transaction


def safely(handle: CacheHandle, op) -> Any:
    """A backend call that may fail (a Redis restart): one warning per outage, never an error.

    While the backend is down, lookups miss and writes are skipped; the lookup stage probes it
    again at most every ``refresh_s`` (without a new warning) and the cache resumes when it answers.
    """
    try:
        out = op(handle.backend)
        handle.down = False
        return out
    except Exception as e:  # noqa: BLE001 - the cache is an optimisation: a failure is a miss
        if not handle.down:
            import warnings

            warnings.warn(f"cache {shown(handle.backend.url)}: {type(e).__name__}: {without_secrets(str(e).splitlines()[0], handle.backend.url) if str(e) else ''}; "
                          "continuing uncached", RuntimeWarning, stacklevel=2)
        handle.down = True
        return None


class CacheWriteParams(StageParams):
    cache: str = Field("cache", description="the name of the cache stage whose cache this writes")


@stage_registry.register("cache_write")
class CacheWrite(Stage):
    type = "cache_write"
    Params = CacheWriteParams
    remembers_queries = True

    def warm_up(self) -> None:
        handle = self.ctx.shared().get(f"cache:{self.params.cache}")
        if handle is None:
            raise ConfigError(f"{self.ctx.path}: stage {self.name!r}: no cache stage named {self.params.cache!r} before it; "
                              f"add {{type: cache}} before retrieve, or set cache: to its name")
        self.handle = handle

    def run(self, batch: list[QueryState], usage: UsageRecord) -> list[QueryState]:
        h = self.handle
        now = time.time()
        written = 0
        for s in batch:
            pending = s.cache_trip
            if not pending or not s.ok or s.answer is None or cut_short(s):
                continue
            docs = [x.doc_id for x in s.hits]
            cand = pending.get("candidate")
            if cand and not cand.get("judged") and cand["similarity"] >= h.params.min_similarity:
                # The miss just paid for the truth: was the nearest cached answer right? Free evidence.
                e = h.entries.get(cand["entry"])
                if e is not None:
                    ok = same_basis([x["doc_id"] for x in e.hits], e.citations, docs, h.params.min_overlap)
                    h.observe(e.id, cand["similarity"], ok)
            entry = CacheEntry(scope=pending["scope"], key=pending["key"], text=pending["text"],
                               vector=None if s.vector is None else np.asarray(s.vector, np.float32),
                               answer=s.answer, citations=list(s.citations), hits=[_stored_hit(x) for x in s.hits],
                               created_at=now, expires_at=now + h.params.ttl_s, cost=_answer_cost(s), version=h.version,
                               question=pending.get("question"), strategy=s.strategy, origin=s.ledger_id)
            if h.down:
                continue  # the backend is unreachable: the lookup stage probes it again, not every write
            safely(h, lambda b: b.put(entry))
            if not h.down:
                h.remember(entry)
                written += 1
        if written and not h.down:
            safely(h, lambda b: b.evict(h.params.max_bytes))
        usage.notes["cache_write"] = {"written": written}
        return batch


def cut_short(s: QueryState) -> bool:
    """Whether the answer may be cut by the request's own limits: finish_reason "length" (max_tokens), or a request
    that sent stop sequences (a stop the server applied is indistinguishable from a natural end). Such an answer is
    never written to the cache: it is that request's, not the question's."""
    g = s.generation
    return g.get("finish_reason") == "length" or bool(s.options.get("stop"))


def _stored_hit(x: Hit) -> dict[str, Any]:
    """What a hit served from the cache must show: the same fields the fresh one had."""
    return {"label": int(x.label), "doc_id": x.doc_id, "score": float(x.score), "title": x.title, "text": x.text,
            "chunk_no": int(x.chunk_no or 0), "metadata": dict(x.metadata or {})}


def _cosine(a: Optional[np.ndarray], b: Optional[np.ndarray]) -> Optional[float]:
    if a is None or b is None or len(a) != len(b):
        return None
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(np.dot(a, b) / (na * nb)) if na and nb else None


def _answer_cost(s: QueryState) -> float:
    """What the answer cost in tokens (a proxy for its dollars, used only to rank entries for eviction)."""
    g = s.generation
    return float((g.get("input_tokens") or 0) + (g.get("output_tokens") or 0) or 1)
