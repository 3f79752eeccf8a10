"""`ragcost index`: read a source, embed only what changed, keep the store exact, rebuild the index.

The store is the source of truth: each batch of documents (rows, chunks and vectors) is
written in one transaction, so a kill at any moment leaves every document either fully
old or fully new, and a rerun finishes the job. The index is derived from the stored
vectors and carries the fingerprint of what made it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Callable, Optional

import numpy as np

from ragcost.errors import ConfigError, IngestError
from ragcost.records import SourceDocument
from ragcost.ingest.base import IngestReport
from ragcost.runtime.load import resolve as _resolve
from ragcost.runtime.pipeline import Pipeline

EMBEDDER_META = "embedder_fingerprint"
WRITE_BATCH = 32  # documents per transaction: small enough that a kill loses little work


@dataclass
class IndexSummary:
    documents: int = 0
    unchanged: int = 0
    embedded_documents: int = 0
    embedded_chunks: int = 0
    pruned: int = 0
    re_embed_reason: Optional[str] = None
    index_built: bool = False
    index_seconds: float = 0.0
    vector_count: int = 0
    index_bytes: int = 0
    embed_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    report: IngestReport = field(default_factory=IngestReport)


def _made_by(raw: Optional[str]) -> Optional[dict]:
    """What made the stored chunks and vectors (model fingerprint and chunking), as last recorded."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:  # written by an older ragcost: a bare model fingerprint
        return {"model": raw}


def doc_text(doc: SourceDocument) -> str:
    """The text that is chunked and embedded: title + text, as BEIR and MTEB embed documents."""
    if doc.title and not doc.text.startswith(doc.title):
        return f"{doc.title}\n{doc.text}"
    return doc.text


def _source(pipe: Pipeline, source: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    cfg = pipe.config.source_config
    if source is not None:
        return source, None
    if cfg.path is None:
        if cfg.reader:
            return None, cfg.reader
        raise IngestError(f"{pipe.path}: no source; pass --source PATH or set source: in the pipeline")
    p = _resolve(pipe.base, cfg.path)
    if p is None:
        raise IngestError(f"source not found: {cfg.path} (looked beside {pipe.path} and in {Path.cwd()}); fix source: or pass --source")
    return str(p), cfg.reader


def _chunker(pipe: Pipeline):
    from ragcost.ingest.chunker import Chunker

    size, overlap = pipe.chunking()
    return Chunker(pipe.embedder.tokenizer, size, overlap)


def run_index(
    pipe: Pipeline,
    source: Optional[str] = None,
    prune: bool = False,
    progress: Optional[Callable[[int, int], None]] = None,
) -> IndexSummary:
    """Bring the store and the index up to date with the source; return what was done."""
    from ragcost.ingest.readers import dedupe, read_source
    from ragcost.store.base import ChunkRecord, DocumentRecord
    from ragcost.store.store import content_hash

    summary = IndexSummary()
    path, reader = _source(pipe, source)
    docs = dedupe(read_source(path, reader, pipe.config.fields, summary.report), summary.report)
    if pipe.config.redact:
        from ragcost.guards import redact_document

        # Before hashing, chunking and storing: the store and the index only ever see redacted text.
        docs = [redact_document(d, pipe.config.redact) for d in docs]
    summary.documents = len(docs)
    emb = pipe.embedder
    emb.warm_up()
    chunker = _chunker(pipe)
    store = pipe.store()

    made_by = {"model": emb.fingerprint(), "chunk_size": chunker.size, "chunk_overlap": chunker.overlap}
    old = _made_by(store.get_meta(EMBEDDER_META))
    if old is not None and old != made_by:
        # Chunks and vectors from two models (or two chunkings) must never mix: drop them all, re-embed.
        what = [k for k in made_by if old.get(k) != made_by[k]]
        summary.re_embed_reason = "changed since the last run: " + ", ".join(
            f"{k} {str(old.get(k))[:12]} -> {str(made_by[k])[:12]}" for k in what
        )
        store.delete(list(store.doc_hashes()))
    if old != made_by:
        store.set_meta(EMBEDDER_META, json.dumps(made_by, sort_keys=True))

    existing = store.doc_hashes()
    todo: list[tuple[SourceDocument, str]] = []
    for d in docs:
        h = content_hash(d)
        if existing.get(d.id) == h:
            summary.unchanged += 1
        else:
            todo.append((d, h))

    t0 = perf_counter()
    done = 0
    for i in range(0, len(todo), WRITE_BATCH):
        part = todo[i : i + WRITE_BATCH]
        pieces = [chunker.chunk(doc_text(d)) for d, _ in part]
        texts = [c.text for chunks in pieces for c in chunks]
        vecs = emb.embed(texts) if texts else np.zeros((0, emb.native_dim), np.float32)
        records, j = [], 0
        for (d, h), chunks in zip(part, pieces):
            crs = []
            for c in chunks:
                crs.append(ChunkRecord(c.text, c.start, c.end, c.n_tokens, vecs[j]))
                j += 1
            records.append(DocumentRecord(d, h, crs))
        store.write(records)
        summary.embedded_documents += len(part)
        summary.embedded_chunks += len(texts)
        done += len(part)
        if progress:
            progress(done, len(todo))
    summary.embed_seconds = perf_counter() - t0

    if prune:
        gone = sorted(set(store.doc_hashes()) - {d.id for d in docs})
        if gone:
            summary.pruned = store.delete(gone)

    rebuild_index(pipe, summary)
    return summary


def rebuild_index(pipe: Pipeline, summary: Optional[IndexSummary] = None) -> IndexSummary:
    """(Re)build the index from the stored vectors unless the current one was made from the same inputs."""
    from ragcost.embed.reduce import truncate
    from ragcost.index.artifact import read_manifest, write_artifact
    from ragcost.index.base import index_registry

    summary = summary or IndexSummary()
    store = pipe.store()
    fingerprint = pipe.index_fingerprint(store.revision())
    manifest = read_manifest(pipe.config.index_path)
    if manifest is not None and manifest.fingerprint == fingerprint:
        summary.vector_count = manifest.vector_count
        summary.index_bytes = manifest.index_bytes
        return summary
    labels, vectors = store.vectors()
    if len(labels) == 0:
        raise IngestError(f"{pipe.path}: the store has no chunks to index; check the source (every document was empty or skipped)")
    vectors = truncate(vectors, pipe.dim)
    cls = index_registry.get(pipe.index_config.backend)
    index = cls(pipe.index_config, pipe.dim, pipe.config.embed.precision)
    t0 = perf_counter()
    index.build(vectors, labels)
    seconds = perf_counter() - t0
    m = write_artifact(pipe.config.index_path, index, labels, vectors, fingerprint, seconds)
    summary.index_built = True
    summary.index_seconds = seconds
    summary.vector_count = m.vector_count
    summary.index_bytes = m.index_bytes
    summary.warnings.extend(m.warnings)
    return summary
