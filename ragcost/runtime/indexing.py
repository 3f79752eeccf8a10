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
from typing import Callable, Iterable, Iterator, Optional, Protocol

import numpy as np

from ragcost.errors import IngestError
from ragcost.records import SourceDocument
from ragcost.ingest.base import IngestReport
from ragcost.runtime.load import resolve as _resolve
from ragcost.runtime.pipeline import Pipeline

EMBEDDER_META = "embedder_fingerprint"
REDACT_KEY_META = "redact_id_key"  # the per-store HMAC key for ids that held personal data
WRITE_BATCH = 32  # documents per transaction: small enough that a kill loses little work
WRITE_CHUNKS = 512  # ... and fewer documents when they are long, so one transaction stays small
EMBED_CHUNKS = 128  # chunks per embed call: the progress bar moves at least this often


class IndexProgress(Protocol):
    """What `ragcost index` shows while it works: a line before each long phase saying what it will do, and each
    phase's progress (``unit`` "chunks" or "sentences" embedded, or "read documents" and "chunked documents" before
    them; the first call of a phase has ``done`` 0; ``total`` 0: not known yet, as while a reader streams)."""

    def plan(self, line: str) -> None: ...

    def step(self, unit: str, done: int, total: int) -> None: ...


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
    index_shards: int = 0  # > 0: built in that many shards
    shards_on_ray: bool = False  # ... by tasks on the Ray cluster
    sentences: int = 0  # sentence vectors kept beside the index for the grounded check (0: none asked for)
    sentences_embedded: int = 0  # ... of which this run embedded (the rest reused by content hash)
    sentence_seconds: float = 0.0
    sentence_bytes: int = 0
    prepared: list[str] = field(default_factory=list)  # what stages built beside the index (Stage.prepare)
    vectors_from_store: int = 0  # eval's corpus: chunk vectors taken from the pipeline's own store, not embedded
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


def _source(pipe: Pipeline, source: Optional[str], reader: Optional[str] = None) -> tuple[Optional[str], Optional[str]]:
    """(path, reader) to read: --source and --reader override the pipeline's source."""
    cfg = pipe.config.source_config
    if source is not None:
        return source, reader
    if cfg.path is None:
        if reader or cfg.reader:
            return None, reader or cfg.reader
        raise IngestError(f"{pipe.path}: no source; pass --source PATH or set source: in the pipeline")
    p = _resolve(pipe.base, cfg.path)
    if p is None:
        raise IngestError(f"source not found: {cfg.path} (looked beside {pipe.path} and in {Path.cwd()}); fix source: or pass --source")
    return str(p), reader or cfg.reader


def _chunker(pipe: Pipeline):
    from ragcost.ingest.chunker import Chunker

    pipe.check_dim()  # before anything is embedded
    size, overlap = pipe.chunking()
    ch = pipe.config.chunking
    return Chunker(pipe.embedder.tokenizer, size, overlap, tail=ch.tail, min_tail=ch.min_tail, title=ch.title)


def read_only_store(pipe: Pipeline):
    """The pipeline's store opened read-only, or None when it does not exist yet (it is never created here)."""
    from ragcost.store import open_store

    file = pipe.store_file
    if file is not None and not file.is_file():
        return None
    return open_store(pipe.config.store_url, pipe.config.name, pipe.config.fields, read_only=True)


def stored_meta(pipe: Pipeline, key: str) -> Optional[str]:
    """One meta value of the pipeline's store, read without creating the store."""
    store = read_only_store(pipe)
    if store is None:
        return None
    try:
        return store.get_meta(key)
    finally:
        store.close()


def _redact(pipe: Pipeline, docs: list[SourceDocument], report: IngestReport,
            write_key: bool = True) -> list[SourceDocument]:
    """Documents (ids included) and report lines as they may be stored and printed under ``redact:``.
    ``write_key=False`` (a dry run): the store's key when it has one, else a throwaway one; nothing is written."""
    import secrets

    from ragcost.guards import redact_document, redact_document_text

    if write_key:
        store = pipe.store()
        key = store.get_meta(REDACT_KEY_META)
        if key is None:  # made once per store, so the same source id always maps to the same stored id
            key = secrets.token_hex(32)
            store.set_meta(REDACT_KEY_META, key)
    else:
        key = stored_meta(pipe, REDACT_KEY_META) or secrets.token_hex(32)
    checks = pipe.config.redact
    report.skipped = [redact_document_text(x, checks) for x in report.skipped]
    report.duplicates = [redact_document_text(x, checks) for x in report.duplicates]
    report.id_clashes = [redact_document_text(x, checks) for x in report.id_clashes]
    return [redact_document(d, checks, bytes.fromhex(key)) for d in docs]


def _refuse_unsafe_prune(store, docs: list[SourceDocument], report: IngestReport, force: bool) -> None:
    """--prune after a read that skipped input would delete what was only unreadable: refuse unless forced."""
    if force or not report.skipped:
        return
    stored = store.doc_hashes()
    gone = set(stored) - {d.id for d in docs}
    if gone:
        raise IngestError(
            f"refusing to prune: the source read skipped {len(report.skipped)} input(s) ({report.first_skipped(2)}), "
            f"and --prune would delete {len(gone)} of {len(stored)} stored documents; fix the source, "
            f"or pass --prune --force to delete them anyway"
        )


def _chunk_batches(todo: list[tuple[SourceDocument, str]], chunker,
                   step: Optional[Callable[[int, int], None]] = None) -> list[list[tuple[SourceDocument, str, list]]]:
    """The documents to embed, chunked, in write batches of at most WRITE_BATCH documents and,
    unless a single document is longer, WRITE_CHUNKS chunks; ``step(done, total)`` hears the documents chunked."""
    batches, cur, n = [], [], 0
    if step is not None and todo:
        step(0, len(todo))
    for i in range(0, len(todo), WRITE_BATCH):
        if step is not None and i:
            step(i, len(todo))
        part = todo[i : i + WRITE_BATCH]
        for (d, h), chunks in zip(part, chunker.chunk_documents([d for d, _ in part])):
            if cur and (len(cur) == WRITE_BATCH or n + len(chunks) > WRITE_CHUNKS):
                batches.append(cur)
                cur, n = [], 0
            cur.append((d, h, chunks))
            n += len(chunks)
    if cur:
        batches.append(cur)
    if step is not None and todo:
        step(len(todo), len(todo))
    return batches


def run_index(
    pipe: Pipeline,
    source: Optional[str] = None,
    prune: bool = False,
    progress: Optional[Callable[[int, int], None]] = None,
    reader: Optional[str] = None,
    force: bool = False,
    worker_progress: Optional[Callable[[str, int], None]] = None,
    phases: Optional[IndexProgress] = None,
) -> IndexSummary:
    """Bring the store and the index up to date with the source; return what was done.

    ``reader`` overrides source.reader; ``progress(done, total)`` counts chunks; ``force`` lets
    --prune delete even when the read skipped input (otherwise that is refused). Under
    ``executor: ray``, ``worker_progress(worker, chunks)`` says how many chunks each worker embedded.
    ``phases`` hears every long phase: what it will do before it starts (chunks and documents to embed, the
    grounded check's sentences after them, the index build) and the progress of the chunk and sentence embedding.
    """
    if phases is not None:
        chunk_progress = progress

        def progress(done: int, total: int) -> None:  # type: ignore[no-redef]
            phases.step("chunks", done, total)
            if chunk_progress:
                chunk_progress(done, total)
    summary = IndexSummary()
    if pipe.config.executor == "ray":  # no cluster or no Ray fails now, before the source is read or a model loads
        from ragcost.runtime.ray_executor import preflight

        preflight(pipe.config.ray_options)
    docs = _read(pipe, source, reader, summary, phases=phases)
    store = pipe.store()
    if prune:
        _refuse_unsafe_prune(store, docs, summary.report, force)
    pipe.embedder.warm_up()
    chunker = _chunker(pipe)
    _drop_what_another_model_made(pipe, store, chunker, summary, docs)
    todo = _changed(store, docs, summary)
    t0 = perf_counter()
    # tokenizing a large corpus is its own wait before the plan line can count the chunks
    batches = _chunk_batches(todo, chunker, (lambda done, total: phases.step("chunked documents", done, total))
                             if phases is not None else None)
    if phases is not None and batches:
        phases.plan(_plan_line(pipe, batches, summary))
    if pipe.config.executor == "ray":
        _embed_on_ray_and_write(pipe, store, batches, summary, progress, worker_progress)
    else:
        _embed_and_write(pipe, store, batches, summary, progress)
    summary.embed_seconds = perf_counter() - t0
    if prune:
        gone = sorted(set(store.doc_hashes()) - {d.id for d in docs})
        if gone:
            summary.pruned = store.delete(gone)
    rebuild_index(pipe, summary, phases)
    refresh_sentence_vectors(pipe, summary, phases)
    prepare_stages(pipe, summary, phases)
    return summary


def prepare_stages(pipe: Pipeline, summary: IndexSummary, phases: Optional[IndexProgress] = None) -> None:
    """What stages keep beside the index from the stored chunks (a hybrid re-rank's BM25 index), built now, so a
    first query loads it instead of building it. Only the stages that declare such a thing are made here."""
    from ragcost.stages.base import Stage

    for cls, params in pipe.loaded.stage_specs:
        if cls.prepare is Stage.prepare:
            continue
        stage = cls(params, pipe)
        if phases is not None and summary.index_built:  # a new corpus revision: it builds (else it loads)
            phases.plan(f"preparing {stage.name}: what it keeps beside the index")
        line = stage.prepare()
        if line:
            summary.prepared.append(f"{stage.name}: {line}")


def _plan_line(pipe: Pipeline, batches: list, summary: IndexSummary) -> str:
    """What this run will embed, said before it starts: a corpus of thousands of chunks is minutes of work."""
    chunks = sum(len(c) for part in batches for _, _, c in part)
    docs = sum(len(part) for part in batches)
    line = (f"to embed: {chunks} chunks of {docs} documents ({summary.unchanged} unchanged) with "
            f"{pipe.config.embed.model}")
    if wants_sentence_vectors(pipe):
        line += ("; then every sentence of the corpus's chunks for the grounded check (sentence_vectors: index, the "
                 "default by measurement: the check then costs a seventh of the CPU a query, same verdicts; "
                 "`sentence_vectors: query` skips this and embeds the cited passages' sentences at each query: docs/guards.md)")
    return line


def wants_sentence_vectors(pipe: Pipeline) -> bool:
    """Whether a grounded answer guard of the pipeline reads index-time sentence vectors (its
    ``sentence_vectors: index``, the default)."""
    from ragcost.guards.grounded import wants_index_sentences
    from ragcost.stages.guard import GuardStage

    return any(issubclass(cls, GuardStage) and wants_index_sentences(params.checks)
               for cls, params in pipe.loaded.stage_specs)


def refresh_sentence_vectors(pipe: Pipeline, summary: Optional[IndexSummary] = None,
                             phases: Optional[IndexProgress] = None) -> IndexSummary:
    """Embed the corpus's sentences once, beside the index, when the pipeline's grounded check reads them and
    the current ones were made from other inputs (sentences whose text is unchanged are reused, not embedded)."""
    from ragcost.guards.sentence_vectors import build_sentence_vectors, sentence_fingerprint, up_to_date

    summary = summary or IndexSummary()
    if not wants_sentence_vectors(pipe):
        return summary
    store = pipe.store()
    fingerprint = sentence_fingerprint(pipe.index_fingerprint(store.revision()))
    m = up_to_date(pipe.config.index_path, fingerprint)
    if m is None:
        labels, texts = store.chunk_column("text")
        step = (lambda done, total: phases.step("sentences", done, total)) if phases is not None else None
        m = build_sentence_vectors(pipe.config.index_path, labels, texts, pipe.embedder, fingerprint, pipe.rebuild_hint(),
                                   progress=step)
        summary.sentences_embedded = m.embedded
        summary.sentence_seconds = m.build_seconds
    summary.sentences, summary.sentence_bytes = m.sentences, m.bytes()
    return summary


def _read(pipe: Pipeline, source: Optional[str], reader: Optional[str], summary: IndexSummary,
          write_key: bool = True, phases: Optional[IndexProgress] = None) -> list[SourceDocument]:
    """The source's documents (one per id, redacted when the pipeline says so); skipped input is reported.
    ``phases`` hears ``read documents`` as they come (a reader streams: the total is known at the end, 0 until)."""
    from ragcost.ingest.readers import dedupe, read_source

    path, reader = _source(pipe, source, reader)
    report = summary.report

    def counted(docs: Iterable[SourceDocument]) -> Iterator[SourceDocument]:
        n = 0
        phases.step("read documents", 0, 0)
        for n, d in enumerate(docs, 1):
            phases.step("read documents", n, 0)
            yield d
        phases.step("read documents", n, n)

    try:
        got = read_source(path, reader, pipe.config.fields, report, pipe.config.source_config.duplicates)
        docs = dedupe(counted(got) if phases is not None else got, report)
    except IngestError as e:
        if not pipe.config.redact:
            raise
        from ragcost.guards import redact_document_text

        raise IngestError(redact_document_text(str(e), pipe.config.redact)) from None  # it may quote a value
    if pipe.config.redact:
        # Before hashing, chunking and storing: the store and the index only ever see redacted text.
        docs = _redact(pipe, docs, report, write_key)
    if not docs and report.skipped:
        raise IngestError(f"{path or reader}: no documents read; skipped {len(report.skipped)} input(s): {report.first_skipped()}")
    summary.documents = len(docs)
    return docs



def _drop_what_another_model_made(pipe: Pipeline, store, chunker, summary: IndexSummary,
                                  docs: list[SourceDocument]) -> None:
    """Chunks and vectors from two models (or two chunkings) must never mix: drop them all, re-embed.
    A change of the title rule alone drops only the documents whose chunk texts it changes (a corpus
    whose texts never begin with their titles keeps every vector from dedupe to prepend; one-window
    documents keep theirs from prepend to every_chunk)."""
    from ragcost.ingest.chunker import LEGACY_TITLE

    made_by = {"model": pipe.embedder.fingerprint(), **chunker.made_by()}
    old = _made_by(store.get_meta(EMBEDDER_META))
    if old is not None and old != made_by:
        keys = sorted(set(old) | set(made_by))
        what = [k for k in keys if old.get(k) != made_by.get(k)]
        summary.re_embed_reason = "changed since the last run: " + ", ".join(
            f"{k} {str(old.get(k))[:12]} -> {str(made_by.get(k))[:12]}" for k in what
        )
        stored = list(store.doc_hashes())
        if what == ["chunk_title"]:
            was = chunker.with_title(old.get("chunk_title", LEGACY_TITLE))
            same: set[str] = set()
            for i in range(0, len(docs), 1000):  # in parts: two chunkings of a whole corpus need not be in memory
                part = docs[i:i + 1000]
                same.update(d.id for d, a, b in zip(part, was.chunk_documents(part), chunker.chunk_documents(part))
                            if [c.text for c in a] == [c.text for c in b])
            stale = [i for i in stored if i not in same]
            summary.re_embed_reason += (f"; the {len(stale)} document(s) whose chunks it changes were re-embedded, "
                                        f"the other {len(stored) - len(stale)} kept their vectors")
            stored = stale
        else:
            summary.re_embed_reason += "; every document was re-embedded"
        store.delete(stored)
    if old != made_by:
        store.set_meta(EMBEDDER_META, json.dumps(made_by, sort_keys=True))


def _changed(store, docs: list[SourceDocument], summary: IndexSummary) -> list[tuple[SourceDocument, str]]:
    """(document, content hash) of the documents the store lacks or holds in another version."""
    from ragcost.store import content_hash

    existing = store.doc_hashes()
    todo: list[tuple[SourceDocument, str]] = []
    for d in docs:
        h = content_hash(d)
        if existing.get(d.id) == h:
            summary.unchanged += 1
        else:
            todo.append((d, h))
    return todo


def _embed_and_write(pipe: Pipeline, store, batches: list, summary: IndexSummary,
                     progress: Optional[Callable[[int, int], None]]) -> None:
    """Embed in pieces so progress moves inside a long document; write each batch whole, in one transaction."""
    emb = pipe.embedder
    total = sum(len(chunks) for part in batches for _, _, chunks in part)
    done = 0
    for part in batches:
        texts = [c.text for _, _, chunks in part for c in chunks]
        pieces = []
        for k in range(0, len(texts), EMBED_CHUNKS):
            pieces.append(emb.embed(texts[k : k + EMBED_CHUNKS]))
            done += len(pieces[-1])
            if progress and done < total and k + EMBED_CHUNKS < len(texts):
                progress(done, total)  # the batch's last piece is reported once it is committed
        vecs = np.vstack(pieces) if pieces else np.zeros((0, emb.native_dim), np.float32)
        _write_part(store, part, vecs, summary)
        if progress:
            progress(done, total)


def _write_part(store, part: list, vecs: np.ndarray, summary: IndexSummary) -> None:
    """One write batch (documents, chunks, vectors) in one transaction: all of it or none of it."""
    from ragcost.store.base import ChunkRecord, DocumentRecord

    records, j = [], 0
    for d, h, chunks in part:
        crs = []
        for c in chunks:
            crs.append(ChunkRecord(c.text, c.start, c.end, c.n_tokens, vecs[j]))
            j += 1
        records.append(DocumentRecord(d, h, crs))
    store.write(records)
    summary.embedded_documents += len(part)
    summary.embedded_chunks += j


def _embed_on_ray_and_write(pipe: Pipeline, store, batches: list, summary: IndexSummary,
                            progress: Optional[Callable[[int, int], None]],
                            worker_progress: Optional[Callable[[str, int], None]]) -> None:
    """The batches embedded by the Ray actors, written here by the driver in the same transactions and order."""
    from ragcost.runtime.ray_executor import RayEmbedding

    total = sum(len(chunks) for part in batches for _, _, chunks in part)
    if not batches:
        return
    done, by_worker = 0, {}
    with RayEmbedding(pipe.config, pipe.base, pipe.embedder, piece=EMBED_CHUNKS) as ray_run:
        texts = [[c.text for _, _, chunks in part for c in chunks] for part in batches]
        for got in ray_run.embed(texts):
            _write_part(store, batches[got.index], got.vectors, summary)
            done += len(got.vectors)
            if got.worker is not None and worker_progress:
                by_worker[got.worker] = by_worker.get(got.worker, 0) + got.embedded
                worker_progress(got.worker, by_worker[got.worker])
            if progress:
                progress(done, total)


def rebuild_index(pipe: Pipeline, summary: Optional[IndexSummary] = None,
                  phases: Optional[IndexProgress] = None) -> IndexSummary:
    """(Re)build the index from the stored vectors unless the current one was made from the same inputs."""
    from ragcost.embed.reduce import truncate
    from ragcost.index.artifact import read_manifest, write_artifact
    from ragcost.index.sharded import check_shards_fit, new_index

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
    shards = pipe.index_shards()
    auto = "" if pipe.index_config.shards else " (from ray.workers: executor: ray builds hnsw in that many shards)"
    check_shards_fit(shards, len(labels), f"{pipe.path}: ", auto)
    index = new_index(pipe.index_config, pipe.dim, pipe.config.embed.precision, shards=shards)
    if phases is not None:
        ic = pipe.index_config
        phases.plan(f"building the index: {ic.backend}/{ic.kind} over {len(labels)} vectors at dim {pipe.dim}"
                    f"{f' in {shards} shards' if shards > 1 else ''}")
    t0 = perf_counter()
    summary.index_shards, summary.shards_on_ray = _build(pipe, index, vectors, labels)
    seconds = perf_counter() - t0
    m = write_artifact(pipe.config.index_path, index, labels, vectors, fingerprint, seconds)
    summary.index_built = True
    summary.index_seconds = seconds
    summary.vector_count = m.vector_count
    summary.index_bytes = m.index_bytes
    summary.warnings.extend(m.warnings)
    return summary


def _build(pipe: Pipeline, index, vectors: np.ndarray, labels: np.ndarray) -> tuple[int, bool]:
    """(shards, on Ray): under ``executor: ray`` an IVF kind's shards are added by the workers and merged,
    a sharded HNSW's graphs built by the workers; else here (a sharded HNSW one graph after another)."""
    from ragcost.index.sharded import ShardedIndex

    sharded = isinstance(index, ShardedIndex)
    if pipe.config.executor == "ray":
        from ragcost.runtime.ray_shards import build_graph_shards, build_sharded

        if sharded:
            return build_graph_shards(index, vectors, labels, pipe.config.ray_options)["shards"], True
        if index.builds_in_shards():  # a kind its backend trains once and fills in shards (faiss's IVF on the CPU)
            return build_sharded(index, vectors, labels, pipe.config.ray_options)["shards"], True
    index.build(vectors, labels)
    return (len(index.shards) if sharded else 0), False
