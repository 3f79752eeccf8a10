"""Shared pieces of the benchmarks: seeded data, cached index builds, a minimal pipeline, timing.

What "through ragcost" means here (kept identical in every benchmark):
the real ``Retrieve`` stage (ragcost.stages.retrieve) runs against ``BenchPipeline``, which
provides ``artifact()`` -- a real ``LoadedIndex`` written by ``write_artifact`` and opened by
``open_artifact`` (index file loaded, vectors memory-mapped, labels, manifest) --,
``index_config`` and ``store()``. The store is ``DictStore``: ``chunks(labels)`` answers from
an in-memory dict and ``matching_labels(expr)`` from precomputed label arrays. So the timings
include the stage's whole Python path (grouping, strategy choice, index wrapper, exact scans,
building ``Hit`` objects with chunk text) but NOT a DuckDB round trip for chunk text or for
the filter (those are measured by the store's own tests, and grow with the store, not the index).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.errors import FingerprintError
from ragcost.records import UsageRecord
from ragcost.index.artifact import LoadedIndex, open_artifact, read_manifest, timed_build, write_artifact
from ragcost.index.exact import exact_search, rows_for_labels  # noqa: F401  (re-exported for benchmarks)
from ragcost.records import QueryState
from ragcost.stages.retrieve import Retrieve, RetrieveParams

CACHE = Path(os.environ.get("RAGCOST_BENCH_CACHE", Path.home() / ".cache" / "ragcost-bench"))
SYNTHETIC_NOTE = (
    "seeded synthetic vectors with cluster structure (256 clusters, 32-d latent spread, small "
    "isotropic noise, L2-normalised), not embedded text: embedding 100k real texts takes hours on this CPU"
)

# The index configurations the benchmarks compare (ann-benchmarks style: build apart from search).
INDEXES: dict[str, dict[str, Any]] = {
    "hnswlib-hnsw": {"backend": "hnswlib", "kind": "hnsw", "build": {"M": 16, "ef_construction": 100}, "search": {"ef": 64}},
    "faiss-flat": {"backend": "faiss", "kind": "flat"},
    "faiss-hnsw": {"backend": "faiss", "kind": "hnsw", "build": {"M": 16, "ef_construction": 100}, "search": {"ef": 64}},
    "faiss-ivf_flat": {"backend": "faiss", "kind": "ivf_flat", "build": {"nlist": "auto"}, "search": {"nprobe": 16}},
    "faiss-ivf_pq": {"backend": "faiss", "kind": "ivf_pq", "build": {"nlist": "auto", "m": 48, "nbits": 8}, "search": {"nprobe": 16}},
    # In PostgreSQL (RAGCOST_BENCH_PGVECTOR_URL, else RAGCOST_TEST_PGVECTOR_URL: scripts/start_pgvector.sh).
    "pgvector-flat": {"backend": "pgvector", "kind": "flat"},
    "pgvector-hnsw": {"backend": "pgvector", "kind": "hnsw", "build": {"m": 16, "ef_construction": 100},
                      "search": {"ef_search": 64}},
}
# What a benchmark runs when not told: the in-process libraries (pgvector needs a server).
LOCAL_INDEXES = [name for name in INDEXES if not name.startswith("pgvector")]


def pgvector_url() -> str:
    """The PostgreSQL (with pgvector) the pgvector rows build into."""
    url = os.environ.get("RAGCOST_BENCH_PGVECTOR_URL") or os.environ.get("RAGCOST_TEST_PGVECTOR_URL")
    if not url:
        raise SystemExit("the pgvector rows need a PostgreSQL with pgvector: eval \"$(scripts/start_pgvector.sh)\" "
                         "or set RAGCOST_BENCH_PGVECTOR_URL")
    return url


# ---- data ------------------------------------------------------------------------------------
def synthetic(n: int, dim: int, seed: int = 0, clusters: int = 256) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(vectors, cluster of each, cluster centres): seeded, L2-normalised, low intrinsic dimension like embeddings."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, dim)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    basis = rng.standard_normal((32, dim)).astype(np.float32) / np.sqrt(dim)
    return _draw(rng, n, centers, basis) + (centers,)


def _draw(rng, n, centers, basis) -> tuple[np.ndarray, np.ndarray]:
    assign = rng.integers(0, len(centers), size=n)
    x = centers[assign] + 0.6 * (rng.standard_normal((n, basis.shape[0])).astype(np.float32) @ basis)
    x += 0.02 * rng.standard_normal(x.shape).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), assign


def synthetic_queries(nq: int, dim: int, seed: int = 0, clusters: int = 256, from_clusters: np.ndarray | None = None):
    """Held-out queries from the same generator as ``synthetic(seed=seed)``: (queries, their cluster)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, dim)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    basis = rng.standard_normal((32, dim)).astype(np.float32) / np.sqrt(dim)
    qrng = np.random.default_rng(seed + 1_000_003)
    if from_clusters is None:
        return _draw(qrng, nq, centers, basis)
    sub = centers[from_clusters]
    q, a = _draw(qrng, nq, sub, basis)
    return q, np.asarray(from_clusters)[a]


def labels_for(n: int) -> np.ndarray:
    """Store-like labels: int64, ascending, not row positions."""
    return (1_000 + np.arange(n, dtype=np.int64) * 3).astype(np.int64)


# ---- index artifacts (cached between runs: builds are minutes at 100k) ------------------------
def artifact(name: str, n: int, dim: int, seed: int = 0, threads: int = 0) -> tuple[LoadedIndex, float]:
    """A real LoadedIndex for INDEXES[name] over ``synthetic(n, dim, seed)``; (artifact, build seconds)."""
    spec = dict(INDEXES[name], threads=threads)
    config = IndexConfig.model_validate(spec)
    fingerprint = {"data": "bench.synthetic", "n": n, "dim": dim, "seed": seed, "index": {k: v for k, v in spec.items() if k != "threads"}}
    key = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]
    folder = CACHE / f"{name}-{n}x{dim}-{key}"
    if config.backend == "pgvector":
        config.at_store(pgvector_url(), f"rc_bench_{key}")
    manifest = read_manifest(folder)
    if manifest is not None and manifest.fingerprint == json.loads(json.dumps(fingerprint)):
        try:
            art = open_artifact(folder, config, fingerprint, "delete the bench cache folder")
            return art, float(art.manifest.build_seconds)
        except FingerprintError:  # pgvector: the server the cached build lived in is a new one
            pass
    x, _, _ = synthetic(n, dim, seed)
    labels = labels_for(n)
    index, seconds = timed_build(config, x, labels)
    write_artifact(folder, index, labels, x, fingerprint, seconds)
    art = open_artifact(folder, config, fingerprint, "delete the bench cache folder")
    return art, float(art.manifest.build_seconds)


# ---- the minimal pipeline the Retrieve stage runs against --------------------------------------
class DictStore:
    """Answers ``chunks(labels)`` from a dict and ``matching_labels({"tag": name, "$and": [...]})`` from arrays."""

    def __init__(self, labels: np.ndarray, chunks_per_doc: int = 4, tags: dict[str, np.ndarray] | None = None) -> None:
        self.tags = dict(tags or {})
        self.rows = {
            int(lb): {"label": int(lb), "doc_id": f"doc-{i // chunks_per_doc}", "chunk_no": i % chunks_per_doc,
                      "title": f"Document {i // chunks_per_doc}", "text": f"chunk text {i}", "metadata": {}}
            for i, lb in enumerate(labels.tolist())
        }

    def chunk_column(self, name):
        labels = sorted(self.rows)
        return np.asarray(labels, dtype=np.int64), [self.rows[x][name] for x in labels]

    def chunks(self, labels: Iterable[int]) -> list[dict]:
        rows = self.rows
        return [rows[x] for x in labels if x in rows]

    def matching_labels(self, expr: dict) -> np.ndarray:
        if "$and" in expr:
            parts = [self.matching_labels(e) for e in expr["$and"]]
            out = parts[0]
            for p in parts[1:]:
                out = np.intersect1d(out, p, assume_unique=True)
            return out
        return self.tags[expr["tag"]]

    def count_matching(self, expr: dict) -> int:
        return int(len(self.matching_labels(expr)))


class BenchPipeline:
    """The StageContext the Retrieve stage runs against here: the loaded artifact and a dict store."""

    resource = "cpu"
    path = base = index_dir = None  # not read by retrieve
    price_book = embedder = None

    def __init__(self, art: LoadedIndex, store: DictStore) -> None:
        self._art, self._store = art, store
        self.index_config = art.index.config
        self.dim = art.manifest.dim if art.manifest is not None else art.index.dim

    def artifact(self) -> LoadedIndex:
        return self._art

    def store(self) -> DictStore:
        return self._store


def retrieve_stage(pipe: BenchPipeline, **params: Any) -> Retrieve:
    stage = Retrieve(RetrieveParams(**params), pipe)
    stage.warm_up()
    return stage


def new_states(queries: np.ndarray, k: int, filt: dict | None = None) -> list[QueryState]:
    return [QueryState(text="", k=k, filter=filt, vector=q) for q in queries]


def run_stage(stage: Retrieve, queries: np.ndarray, k: int, filt: dict | None = None) -> list[QueryState]:
    states = new_states(queries, k, filt)
    stage.run(states, UsageRecord(stage="retrieve", resource="cpu", items=len(states)))
    return states


def time_stage_each(stage: Retrieve, queries: np.ndarray, k: int, filt: dict | None = None) -> tuple[np.ndarray, list[QueryState]]:
    """Seconds per single-query ``stage.run`` (the QueryState and UsageRecord exist before, as in a pipeline)."""
    out = np.empty(len(queries))
    done = []
    for i in range(len(queries)):
        states = new_states(queries[i : i + 1], k, filt)
        usage = UsageRecord(stage="retrieve", resource="cpu", items=1)
        t0 = time.perf_counter()
        stage.run(states, usage)
        out[i] = time.perf_counter() - t0
        done += states
    return out, done


def hit_labels(states: list[QueryState], k: int) -> np.ndarray:
    out = np.full((len(states), k), -1, dtype=np.int64)
    for i, s in enumerate(states):
        lb = [h.label for h in s.hits[:k]]
        out[i, : len(lb)] = lb
    return out


# ---- metrics and timing ------------------------------------------------------------------------
def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean over queries of |found ∩ truth| / |truth| (truth rows may be padded with -1)."""
    vals = []
    for f, t in zip(found, truth):
        t = t[t >= 0]
        if len(t):
            vals.append(len(np.intersect1d(f[f >= 0], t)) / len(t))
    return float(np.mean(vals)) if vals else 1.0


def ground_truth(vectors: np.ndarray, labels: np.ndarray, queries: np.ndarray, k: int, rows: np.ndarray | None = None) -> np.ndarray:
    return exact_search(vectors, labels, queries, k, rows=rows)[1]


def time_each(fn: Callable[[np.ndarray], Any], queries: np.ndarray) -> np.ndarray:
    """Seconds per single-query call."""
    out = np.empty(len(queries))
    for i in range(len(queries)):
        q = queries[i : i + 1]
        t0 = time.perf_counter()
        fn(q)
        out[i] = time.perf_counter() - t0
    return out


def time_call(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def pct_us(seconds: Iterable[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(list(seconds)), q)) * 1e6, 1)


def median(xs: Iterable[float]) -> float:
    return float(statistics.median(list(xs)))


def machine() -> dict[str, Any]:
    import faiss
    import hnswlib  # noqa: F401
    from importlib.metadata import version

    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "faiss": faiss.__version__,
        "hnswlib": version("hnswlib"),
        "load_avg_at_start": list(os.getloadavg()),
    }


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result, indent=2, default=float))


def emit_to(result: dict[str, Any], out: Path | None) -> int:
    """Print the result as JSON, and write it to ``out`` too when given (a bench's saved run); exit code 0."""
    text = json.dumps(result, indent=1)
    if out:
        out.write_text(text + "\n")
    print(text)
    return 0
