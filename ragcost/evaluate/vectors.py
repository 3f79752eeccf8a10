"""Embed a dataset's corpus and queries once per embedder, and reuse them for every configuration.

The corpus goes through the pipeline's own indexing (``run_index`` with the beir reader) into a
Store of its own: ``.ragcost/eval/<dataset>-<fingerprint12>-c<size>o<overlap>.duckdb``. The
fingerprint is the model's bytes, the name carries the chunking, and the store's per-document
content hashes (with pruning) keep it at the corpus revision, so a rerun embeds nothing new.
Query vectors are cached beside it per embedder (not per chunking), keyed by the hash of each
query's text, with the tokens that price them.

What embedding the evaluated queries costs is measured the way ``ragcost query`` measures it: the
pipeline's embed stage through the runner (its CPU meter, the stage's tokenizer count), over the
evaluated queries in calls of the traffic's batch size (one at a time by default, as the book's declared
traffic arrives: :mod:`ragcost.evaluate.traffic`), whole rounds (at least three, and on until they
span five seconds, at most nine), each batch its median round (the warm cost a served pipeline pays; a
first round builds torch's kernels for each new input shape). A batch's CPU and wall seconds are split
over its queries by each one's work (its tokens plus the call's fixed part, as the runner splits a
served batch), so the per-query figures sum to the batch's. The measurement is
kept in ``<dataset>-<fingerprint12>.query-cpu.json`` under a key of the query set and of the
conditions it depends on (thread policy, torch threads, CPUs, the embed config, the batch size, the meter): rerun
under the same conditions it is reused (every chunking of a grid prices the same seconds); under
other conditions, or for another query set, it is measured again, never carried over.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter, process_time
from typing import Any, Callable, Optional

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.config.pipeline import SourceConfig
from ragcost.runtime.indexing import IndexSummary, run_index
from ragcost.runtime.pipeline import Pipeline

DEFAULT_CACHE = Path(".ragcost/eval")


@dataclass
class CorpusVectors:
    """Every chunk's full-dimension vector, sorted by label, and the document each belongs to."""

    labels: np.ndarray  # (n,) int64, ascending
    vectors: np.ndarray  # (n, native_dim) float32, L2-normalised
    doc_of: np.ndarray  # (n,) int64: position in doc_ids
    doc_ids: list[str]
    summary: IndexSummary
    store_url: str
    pipeline: Pipeline  # the cache pipeline: its store() holds the chunk texts (for rerank stages)


@dataclass
class QueryVectors:
    ids: list[str]
    vectors: np.ndarray  # (q, native_dim) float32
    seconds: np.ndarray  # (q,) this query's share of the batch call that embedded it
    tokens: np.ndarray  # (q,) input tokens the model read
    embedded_now: int  # how many were not in the cache
    cpu: Optional[np.ndarray] = None  # (q,) this query's share of the process CPU seconds of that batch call

    def cpu_seconds(self, n: int) -> Optional[float]:
        """CPU seconds of the first ``n`` queries' embedding (what a CPU resource is priced by), None if unmeasured."""
        return None if self.cpu is None else float(self.cpu[:n].sum())


def cache_key(pipe: Pipeline, dataset: Path) -> str:
    from ragcost.ingest.chunker import LEGACY_TITLE, default_min_tail

    fp = pipe.embedder.fingerprint()
    size, overlap = pipe.chunking()
    ch = pipe.config.chunking
    tail = "" if ch.tail == "none" else f"-{ch.tail}{ch.min_tail or default_min_tail(size)}"
    title = "" if ch.title == LEGACY_TITLE else f"-t{ch.title}"
    return f"{dataset.name}-{fp[:12]}-c{size}o{overlap}{tail}{title}"


def text_cache_path(pipe: Pipeline, dataset: Path, cache_dir: Path) -> Path:
    """Vectors by chunk text, shared by every chunking of this dataset under this embedder."""
    return cache_dir / f"{dataset.name}-{pipe.embedder.fingerprint()[:12]}.texts.npz"


def cache_pipeline(pipe: Pipeline, dataset: Path, cache_dir: Path) -> Pipeline:
    """The pipeline, pointed at the dataset and at a store of its own (the same embedder object)."""
    key = cache_key(pipe, dataset)
    cfg = pipe.config.model_copy(update={
        "store": f"duckdb:///{cache_dir / (key + '.duckdb')}",
        "index_dir": str(cache_dir / f"{key}.index"),
        "source": SourceConfig(path=str(dataset.resolve()), reader="beir"),
        "index": IndexConfig(backend="faiss", kind="flat"),  # run_index ends with a build; keep it trivial
        "embed": pipe.config.embed.model_copy(update={"dim": None, "precision": "float32"}),
    })
    from ragcost.runtime.load import LoadedPipeline

    from ragcost.evaluate.textcache import CachedEmbedder, TextVectorCache

    cp = Pipeline(LoadedPipeline(cfg, pipe.path, pipe.raw, cfg.index, []))
    # one loaded model (a cached_property's slot), answering chunk texts another chunking embedded already
    cp.__dict__["embedder"] = CachedEmbedder(pipe.embedder, TextVectorCache(text_cache_path(pipe, dataset, cache_dir)))
    return cp


def embed_corpus(
    pipe: Pipeline, dataset: Path, cache_dir: Path = DEFAULT_CACHE,
    progress: Optional[Callable[[int, int], None]] = None,
) -> CorpusVectors:
    """Bring the cache store up to date with the dataset's corpus and return its vectors."""
    cp = cache_pipeline(pipe, dataset, cache_dir)
    seeded = seed_from_store(pipe, cp.embedder._cache)
    # The cache mirrors the dataset: documents gone from it go, even when the read skipped a bad line
    # (those are reported as warnings of the run).
    summary = run_index(cp, prune=True, force=True, progress=progress)
    summary.vectors_from_store = len(seeded & cp.embedder.hit_hashes) if seeded else 0
    store = cp.store()
    labels, vectors = store.vectors()
    _, chunk_docs = store.chunk_column("doc_id")  # same labels, same (ascending) order
    cache = cp.embedder._cache
    cache.add(store.chunk_column("text")[1], vectors)  # a store embedded before the text cache seeds it
    cache.save()
    doc_ids = sorted(set(chunk_docs))
    pos = {d: i for i, d in enumerate(doc_ids)}
    doc_of = np.fromiter((pos[d] for d in chunk_docs), dtype=np.int64, count=len(chunk_docs))
    return CorpusVectors(labels, vectors, doc_of, doc_ids, summary, cp.config.store_url, cp)


def seed_from_store(pipe: Pipeline, cache: Any) -> set[str]:
    """Offer the text cache the vectors `ragcost index` already stored for this pipeline, when the same model made
    them (its fingerprint: model files, runtime, precision): a chunk whose text eval makes again is not embedded
    twice (a user's 4,594 chunks took eval 13 minutes after `index` had embedded them). Matched by text, so a
    chunking that differs shares the chunks it does not change. Returns the hashes offered; nothing when the store
    is not there (never created here), was made by another model, or cannot be opened now (held by a server)."""
    from ragcost.runtime.indexing import EMBEDDER_META, _made_by, read_only_store

    try:
        store = read_only_store(pipe)  # None when there is none: never created here
    except Exception:  # noqa: BLE001  (a server's lock, a database that is down: eval embeds as before)
        return set()
    if store is None:
        return set()
    try:
        made = _made_by(store.get_meta(EMBEDDER_META))
        if not made or made.get("model") != pipe.embedder.fingerprint():
            return set()
        labels, texts = store.chunk_column("text")
        vlabels, vectors = store.vectors()
        if len(labels) == 0 or not np.array_equal(labels, vlabels):
            return set()
        return cache.offer(texts, vectors)
    except Exception:  # noqa: BLE001  (an older or partial store: nothing to reuse)
        return set()
    finally:
        store.close()


def _text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def embed_queries(pipe: Pipeline, queries: dict[str, str], dataset: Path, cache_dir: Path = DEFAULT_CACHE,
                  batch: int = 1) -> QueryVectors:
    """Vectors of ``queries`` (id -> text), from the cache where the text is unchanged, else embedded in batches;
    their cost measured in calls of ``batch`` queries (the traffic they are priced at, :mod:`ragcost.evaluate.traffic`)."""
    emb = pipe.embedder
    # keyed by the embedder alone: queries are not chunked, so every chunking of the grid prices the same
    # query vectors and embedding seconds (a re-timed copy per chunking would make its dollars differ by noise)
    path = cache_dir / f"{dataset.name}-{pipe.embedder.fingerprint()[:12]}.queries.npz"
    cached: dict[str, tuple[str, np.ndarray, float, int, float]] = {}
    if path.is_file():
        z = np.load(path, allow_pickle=False)
        # a cache written before CPU time was measured has no "cpu": its queries are embedded (and timed) again
        cpu = z["cpu"] if "cpu" in z.files else np.full(len(z["ids"]), np.nan)
        for i, qid in enumerate(z["ids"].tolist()):
            cached[qid] = (str(z["hashes"][i]), z["vectors"][i], float(z["seconds"][i]), int(z["tokens"][i]), float(cpu[i]))
    ids = list(queries)
    todo = [q for q in ids if q not in cached or cached[q][0] != _text_hash(queries[q]) or np.isnan(cached[q][4])]
    if todo:
        emb.warm_up()
        bs = pipe.config.embed.batch_size
        for i in range(0, len(todo), bs):
            part = todo[i:i + bs]
            texts = [queries[q] for q in part]
            c0, t0 = process_time(), perf_counter()
            vecs = emb.embed(texts)
            share = (perf_counter() - t0) / len(part)
            cpu_share = max(process_time() - c0, 0.0) / len(part)
            counts = [min(n, emb.max_tokens) for n in emb.count_tokens(texts)]
            for q, v, n in zip(part, vecs, counts):
                cached[q] = (_text_hash(queries[q]), np.asarray(v, np.float32), share, n, cpu_share)
        cache_dir.mkdir(parents=True, exist_ok=True)
        keys = sorted(cached)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, ids=np.array(keys), hashes=np.array([cached[q][0] for q in keys]),
                 vectors=np.vstack([cached[q][1] for q in keys]).astype(np.float32),
                 seconds=np.array([cached[q][2] for q in keys]), tokens=np.array([cached[q][3] for q in keys]),
                 cpu=np.array([cached[q][4] for q in keys]))
        tmp.replace(path)
    seconds, cpu = query_cpu(pipe, ids, [queries[q] for q in ids], dataset, cache_dir, batch)
    return QueryVectors(
        ids, np.vstack([cached[q][1] for q in ids]).astype(np.float32),
        seconds, np.array([cached[q][3] for q in ids]), len(todo), cpu)


MEASURE_VERSION = 6  # 1: process CPU of emb.embed, each query its batch's share of whichever set was embedded first;
# 2: one timed round after one untimed batch (a batch of a new shape paid torch's kernel build);
# 3: three whole rounds, each batch its median round; 4: rounds on until they span MEASURE_SPAN_S;
# 5: calls of the traffic's batch size, each batch's CPU split over its queries by their work (4 gave a batch's
# whole CPU to its first query); 6: the embed stage runs the lean BERT encoder where it applies, as a query process does
MEASURE_ROUNDS = 3  # at least this many timed rounds over every batch; a batch's figure is its median round
MEASURE_SPAN_S = 5.0  # ...and more rounds until they span this long: a slow spell of the machine outlasts a round
MEASURE_MAX_ROUNDS = 9
KEEP_MEASUREMENTS = 16


def measure_conditions(pipe: Pipeline, batch: int = 1) -> dict:
    """What a query-embedding CPU figure depends on besides the texts; one measured under others is measured again."""
    from ragcost.runtime.cpu import METER

    torch = sys.modules.get("torch")  # loaded by the embedder's warm_up when it is a torch model
    return {"version": MEASURE_VERSION, "embed": pipe.config.embed.model_dump(mode="json"), "batch": batch,
            "per_thread_meter": METER.per_thread, "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads() if torch is not None else None,
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "RAGCOST_TORCH_THREADS": os.environ.get("RAGCOST_TORCH_THREADS")}


def query_cpu(pipe: Pipeline, ids: list[str], texts: list[str], dataset: Path, cache_dir: Path,
              batch: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(wall, CPU) seconds per query of embedding exactly these queries as ``ragcost query`` does, in calls of
    ``batch`` queries, each call's seconds split over its queries by their work (summing to the call's);
    reused only when measured for the same queries under the same conditions."""
    path = cache_dir / f"{dataset.name}-{pipe.embedder.fingerprint()[:12]}.query-cpu.json"
    cond = measure_conditions(pipe, batch)
    key = hashlib.sha256(json.dumps([cond, [_text_hash(t) for t in texts]], sort_keys=True).encode()).hexdigest()[:20]
    book: dict = {}
    if path.is_file():
        try:
            book = json.loads(path.read_text())
        except (OSError, ValueError):
            book = {}  # a damaged file is measured again, never trusted
    got = book.get(key)
    if isinstance(got, dict) and len(got.get("cpu") or []) == len(ids) and got.get("conditions") == cond:
        return np.asarray(got["seconds"], float), np.asarray(got["cpu"], float)
    seconds, cpu, batches = _measure(pipe, ids, texts, batch)
    book[key] = {"conditions": cond, "queries": len(ids), "seconds": seconds.tolist(), "cpu": cpu.tolist(), "batches": batches}
    book = dict(list(book.items())[-KEEP_MEASUREMENTS:])
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.json")
    tmp.write_text(json.dumps(book))
    tmp.replace(path)
    return seconds, cpu


def _measure(pipe: Pipeline, ids: list[str], texts: list[str], bs: int = 1) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """The pipeline's embed stage over the queries in calls of ``bs`` queries, timed by the runner:
    whole rounds over every batch, at least MEASURE_ROUNDS and on until they span MEASURE_SPAN_S (at most
    MEASURE_MAX_ROUNDS), each batch its median round, split over its queries by :func:`_shares` (so they sum to
    the batch's). Returns per query (wall, CPU) and per batch its queries, CPU and wall.

    Why a span: on the 2-core VM a round over 112 Cranfield queries takes 0.8 s, and the machine has slow
    spells of 1-3 s in which every round costs 20-40% more CPU (a 60 s trace of one 64-query batch: p10
    0.68, median 0.72, p90 0.85 CPU-s, the slow rounds in runs). Three back-to-back rounds could all fall
    in one: a measurement 1.4x another's a minute later, and a held-out Cranfield query-time ÷ eval ratio
    of 0.87 because the eval side was the slow one.

    Whole rounds, so a burst of load on the machine hits one round of a batch, not all of it; the median, so
    the first round is left out where it is the slow one: torch's CPU kernels are built per input shape on
    first use (a batch of a new padded length), and a first round cost up to 1.5x the steady state. A
    served pipeline runs warm; that is the cost eval predicts (one cold round made the held-out SciFact
    query-time ÷ eval ratio 0.84, tests/evaluate/test_expected_heldout.py)."""
    from ragcost.records import QueryState
    from ragcost.runtime.runner import Runner
    from ragcost.stages.embed import EmbedQueries

    stage = EmbedQueries(EmbedQueries.Params(resource=pipe.config.embed.resource), pipe)
    stage.warm_up()
    runner = Runner([stage], pipe.price_book)
    batch = lambda lo: [QueryState(text=t, id=q) for q, t in zip(ids[lo:lo + bs], texts[lo:lo + bs])]  # noqa: E731
    starts = list(range(0, len(ids), bs))
    wall, cpu = np.zeros((MEASURE_MAX_ROUNDS, len(starts))), np.zeros((MEASURE_MAX_ROUNDS, len(starts)))
    shares: list[np.ndarray] = [np.ones(1)] * len(starts)
    rounds, t0 = 0, perf_counter()

    def more() -> bool:  # an odd count, so the median is a round (MEASURE_ROUNDS and MEASURE_MAX_ROUNDS are odd)
        if rounds >= MEASURE_MAX_ROUNDS:
            return False
        return rounds < MEASURE_ROUNDS or rounds % 2 == 0 or perf_counter() - t0 < MEASURE_SPAN_S

    while more():
        for b, lo in enumerate(starts):
            states = batch(lo)
            res = runner.run(states)
            rec = res.calls[0].record  # a split call's records each carry the call's CPU and wall once
            shares[b] = _shares(res, states, pipe)
            wall[rounds, b] = rec.wall_seconds
            cpu[rounds, b] = rec.cpu_seconds if rec.cpu_seconds is not None else rec.wall_seconds
        rounds += 1
    wall, cpu = wall[:rounds], cpu[:rounds]
    w_out, c_out = np.zeros(len(ids)), np.zeros(len(ids))
    batches = []
    for b, lo in enumerate(starts):
        share = shares[b]
        pick = int(np.argsort(cpu[:, b])[rounds // 2])  # the median round; its wall beside its CPU
        w_out[lo:lo + len(share)] = wall[pick, b] * share
        c_out[lo:lo + len(share)] = cpu[pick, b] * share
        batches.append({"queries": len(share), "cpu": float(cpu[pick, b]), "wall": float(wall[pick, b])})
    return w_out, c_out, batches


def _shares(res: Any, states: list, pipe: Pipeline) -> np.ndarray:
    """Each query's part of its batch call, summing to 1: the runner's split by work where the stage said
    what each query made it do (an embed's tokens plus the call's fixed part), else by tokens alone
    (an embedder with no measured fixed part), evenly only when no query has a token."""
    n = len(states)
    if n == 1:
        return np.ones(1)
    own = {id(c.query): c.record.busy_share for c in res.calls if c.query is not None and c.record.busy_share is not None}
    if len(own) == n:
        share = np.array([own[id(s)] for s in states], float)
    else:
        emb = pipe.embedder
        share = np.array([min(t, emb.max_tokens) for t in emb.count_tokens([s.text for s in states])], float)
    total = share.sum()
    return share / total if total > 0 else np.full(n, 1.0 / n)
