"""`ragcost index --dry-run`: what indexing would embed, how long it would take and what it would cost, said before
anything is embedded or written.

The counts are exact (the source is read and chunked as `index` would, and compared with the store by content
hash); the time is measured, not assumed: a seeded sample of the chunks to embed (and of the grounded check's
sentences) is embedded once after a warm-up call, and the run's time is the sample's time per text times the texts.
A random sample pads its batches as the corpus's batches pad, so seconds per text carries over where tokens per
second would not (a 12-token sentence costs far more than 1/16 of a 200-token chunk). The dollars price the CPU the
sample used (or its wall time on a GPU, its tokens on an API) on the embed resource, as a query's embedding is priced.
Nothing is written: no store is created, the store's rows and meta stay as they were, no vector is kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ragcost.runtime.pipeline import Pipeline

SAMPLE_CHUNKS = 64
SAMPLE_SENTENCES = 256
SEED = 0


@dataclass
class Phase:
    """One embedding phase: how many texts, how long the measured sample took, and the estimate."""

    texts: int
    tokens: int
    sample: int = 0
    sample_seconds: float = 0.0
    sample_cpu_seconds: float = 0.0
    seconds: float = 0.0  # the estimate for all ``texts``
    cpu_seconds: float = 0.0
    usd: float = 0.0

    def scale(self) -> None:
        if self.sample:
            f = self.texts / self.sample
            self.seconds, self.cpu_seconds = self.sample_seconds * f, self.sample_cpu_seconds * f


@dataclass
class IndexEstimate:
    documents: int
    unchanged: int
    embed_documents: int
    chunks: Phase
    sentences: Optional[Phase]  # None: the pipeline's grounded check reads no index-time sentence vectors
    resource: str
    re_embed_reason: Optional[str] = None
    report: Any = None  # the read's IngestReport: what it skipped, did not read, read once (as `index` says it)

    @property
    def seconds(self) -> float:
        return self.chunks.seconds + (self.sentences.seconds if self.sentences else 0.0)

    @property
    def usd(self) -> float:
        return self.chunks.usd + (self.sentences.usd if self.sentences else 0.0)


def estimate_index(pipe: Pipeline, source: Optional[str] = None, reader: Optional[str] = None,
                   sample_chunks: int = SAMPLE_CHUNKS, sample_sentences: int = SAMPLE_SENTENCES) -> IndexEstimate:
    """Counts, measured time and dollars of `ragcost index` on this pipeline now, writing nothing."""
    from ragcost.runtime.indexing import IndexSummary, _chunker, _made_by, _read, wants_sentence_vectors
    from ragcost.store import content_hash

    summary = IndexSummary()
    docs = _read(pipe, source, reader, summary, write_key=False)
    chunker = _chunker(pipe)
    stored, meta = _stored_hashes(pipe)
    made_by = {"model": pipe.embedder.fingerprint(), **chunker.made_by()}
    old, reason = _made_by(meta), None
    if old is not None and old != made_by:  # counted as index would re-embed after a model or chunking change
        reason = "the model or the chunking changed since the last run: every document is counted as re-embedded"
        stored = {}
    todo = [d for d in docs if stored.get(d.id) != content_hash(d)]
    chunks = [c for cs in chunker.chunk_documents(todo) for c in cs] if todo else []
    est = IndexEstimate(documents=len(docs), unchanged=len(docs) - len(todo), embed_documents=len(todo),
                        chunks=Phase(len(chunks), int(sum(c.n_tokens for c in chunks))),
                        sentences=None, resource=pipe.config.embed.resource or pipe.config.resource,
                        re_embed_reason=reason, report=summary.report)
    rng = np.random.default_rng(SEED)
    emb = pipe.embedder
    emb.warm_up()
    if chunks:
        texts = [c.text for c in chunks]
        _measure(emb, [texts[i] for i in sorted(rng.choice(len(texts), min(sample_chunks, len(texts)), replace=False))],
                 est.chunks, sort=False)
    if wants_sentence_vectors(pipe):
        from ragcost.guards.sentence_vectors import split_chunks

        _, sents, _ = split_chunks(np.arange(len(chunks), dtype=np.int64), [c.text for c in chunks])
        unique = list(dict.fromkeys(sents))  # a repeated sentence (overlapping windows) is embedded once
        est.sentences = Phase(len(unique), _tokens_if_priced_by_tokens(pipe, est.resource, unique))
        if unique:
            _measure(emb, [unique[i] for i in rng.choice(len(unique), min(sample_sentences, len(unique)), replace=False)],
                     est.sentences, sort=True)
    _price(pipe, est)
    return est


def _stored_hashes(pipe: Pipeline) -> tuple[dict[str, str], Optional[str]]:
    """The store's document hashes and its recorded embedder (EMBEDDER_META), read without creating it."""
    from ragcost.runtime.indexing import EMBEDDER_META, read_only_store

    store = read_only_store(pipe)
    if store is None:
        return {}, None
    try:
        return dict(store.doc_hashes()), store.get_meta(EMBEDDER_META)
    finally:
        store.close()


def _measure(emb, sample: list[str], phase: Phase, sort: bool) -> None:
    """Embed the sample once (after a warm-up call on two of its texts) and scale its wall and CPU time."""
    from ragcost.guards.sentence_vectors import embed_sorted

    emb.embed(sample[:2])  # first calls pay lazy initialisation a long run pays once
    t0, c0 = time.perf_counter(), time.process_time()
    embed_sorted(emb, sample) if sort else emb.embed(sample)
    phase.sample, phase.sample_seconds, phase.sample_cpu_seconds = len(sample), time.perf_counter() - t0, time.process_time() - c0
    phase.scale()


def _tokens_if_priced_by_tokens(pipe: Pipeline, resource: str, texts: list[str]) -> int:
    """The texts' tokens where the embed resource is an API priced by tokens (0 otherwise: not needed)."""
    from ragcost.cost.pricebook import TokenResource

    if not texts or not isinstance(pipe.price_book.resources.get(resource), TokenResource):
        return 0
    return int(sum(pipe.embedder.count_tokens(texts)))


def _price(pipe: Pipeline, est: IndexEstimate) -> None:
    """Each phase's dollars on the embed resource, as the runner prices an embedding call."""
    from ragcost.cost.compute import cost_of
    from ragcost.records import UsageRecord

    book = pipe.price_book
    for phase in (est.chunks, est.sentences):
        if phase is None or not phase.texts:
            continue
        rec = UsageRecord(stage="index", resource=est.resource, wall_seconds=phase.seconds, items=phase.texts,
                          cpu_seconds=phase.cpu_seconds, input_tokens=phase.tokens or None)
        phase.usd = cost_of(rec, book)


@dataclass
class StoredCorpus:
    """What `ragcost plan --pipeline` reads from an indexed pipeline: its size, and its embedding rate measured on
    a sample of its own chunks on this machine."""

    chunks: int
    dim: int
    store_bytes: int  # the store's own tables (texts, ids, metadata, the stored vectors), as query time charges them
    sample: int
    sample_seconds: float
    cpu_seconds: float

    @property
    def store_bytes_per_chunk(self) -> float:
        return self.store_bytes / self.chunks if self.chunks else 0.0

    @property
    def chunks_per_second(self) -> float:
        return self.sample / self.sample_seconds if self.sample_seconds > 0 else 0.0


def measure_stored(pipe: Pipeline, sample_chunks: int = SAMPLE_CHUNKS) -> StoredCorpus:
    """The indexed corpus's chunks, dim and store bytes, and a seeded sample of its chunk texts embedded once after
    a warm-up call (the rate `plan` scales: the user's own chunks, not a bench's); a ConfigError when not indexed."""
    from ragcost.errors import ConfigError
    from ragcost.runtime.indexing import read_only_store

    store = read_only_store(pipe)
    if store is None:
        raise ConfigError(f"{pipe.path}: not indexed yet (no store at {pipe.config.store_url}); run `ragcost index "
                          f"{pipe.path}` first, or plan with --chunks and --dim")
    try:
        n = store.count_chunks()
        if n == 0:
            raise ConfigError(f"{pipe.path}: the store holds no chunks; run `ragcost index {pipe.path}` first, or plan "
                              "with --chunks and --dim")
        _, texts = store.chunk_column("text")
    finally:
        store.close()
    rng = np.random.default_rng(SEED)
    sample = [texts[i] for i in sorted(rng.choice(len(texts), min(sample_chunks, len(texts)), replace=False))]
    emb = pipe.embedder
    emb.warm_up()
    emb.embed(sample[:2])  # first calls pay lazy initialisation a long run pays once
    t0, c0 = time.perf_counter(), time.process_time()
    emb.embed(sample)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return StoredCorpus(n, pipe.dim, pipe.store_bytes(), len(sample), seconds, cpu)
