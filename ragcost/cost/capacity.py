"""Capacity of a whole corpus: RAM and disk per shard, machines of a price-book instance, $ per month, build time.

Pure functions over numbers; ``ragcost plan --chunks N --dim D --kind K --shards S --replicas R``
prints them beside their inputs. The bytes per vector of each kind are structural models of what
the engine allocates, checked against measured builds by ``python -m bench.plan_ram``:

- ``hnsw`` (hnswlib): level 0 (vector, label, 2M links), the upper levels (1/(M-1) of them per
  element on average), and per element the link-list pointer, level, lock and label-map entry;
  65,536 label locks once per index.
- ``ivf_pq`` (faiss): m x nbits/8 code bytes and an int64 id per vector, plus the coarse
  centroids and the PQ codebooks once per shard.
- ``pgvector-hnsw``: pgvector's on-disk graph, 8 KiB pages packed with element tuples (72-byte
  header + the vector) and neighbour tuples ((level + 2) x m item pointers of 6 bytes); it must
  sit in PostgreSQL's cache to be searched at speed, so it counts as RAM.

RAM and disk then follow the one storage formula (``ragcost.cost.storage``): the serving process's
float32 exact-scan copy is RAM unless the index itself holds every vector at float32.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Optional

from ragcost.cost.storage import holds_float32, storage_bytes
from ragcost.errors import ConfigError

CORPUS_KINDS = ("hnsw", "ivf_pq", "pgvector-hnsw")
HOURS_PER_MONTH = 730
# Share of an instance's memory the index may fill: the OS, the query process and page cache keep the rest.
USABLE_RAM = 0.8
# Texts (chunks) per second one 2-core CPU worker embeds with all-MiniLM-L6-v2 through ragcost:
# `python -m bench.embed`, sentence-transformers (torch), README "Embedding runtimes" (18.1 texts/s).
EMBED_PER_SECOND = 18.1

# hnswlib per slot of max_elements beyond level 0 (hnswalg.h): link-list pointer 8, level 4,
# std::mutex 40 (link_list_locks_), the visited list's unsigned short 2.
_HNSWLIB_SLOT = 8 + 4 + 40 + 2
# Per element: its label_lookup_ node (unordered_map: next pointer, key, value, malloc header, ~40 with
# the bucket array); per element with upper levels (1 in M): the malloc header of its link lists.
_HNSWLIB_LABEL = 40
_HNSWLIB_MALLOC = 16
_HNSWLIB_FIXED = 65536 * 40  # hnswlib's label_op_locks: 65,536 std::mutex per index
_HNSWLIB_EXTRA = _HNSWLIB_SLOT + _HNSWLIB_LABEL  # kept for callers of the per-vector figure
# pgvector 0.8 (hnsw.h): element tuple header, item pointer, page header, special space, line pointer.
_PG_ELEMENT_HEADER, _PG_TID, _PG_PAGE, _PG_PAGE_FREE, _PG_ITEM_ID = 72, 6, 8192, 8192 - 24 - 8, 4


def _maxalign(n: int) -> int:
    return (n + 7) // 8 * 8


def hnswlib_bytes_per_vector(dim: int, M: int = 16, vector_bytes: Optional[float] = None) -> float:
    """hnswlib's bytes per element (``vector_bytes``: the stored vector, float32 by default), as loaded
    with ``max_elements`` equal to the count; the once-per-index locks are :func:`hnswlib_bytes`'s."""
    vec = dim * 4 if vector_bytes is None else vector_bytes
    level0 = vec + 8 + 4 + 2 * M * 4  # vector, label, link count, 2M links (hnswlib's size_data_per_element)
    upper = (4 + M * 4) / max(M - 1, 1)  # an element has 1/(M-1) upper levels on average (mult 1/ln M)
    return level0 + upper + _HNSWLIB_SLOT + _HNSWLIB_LABEL + _HNSWLIB_MALLOC / M


def hnswlib_bytes(n: int, dim: int, M: int = 16, max_elements: Optional[int] = None,
                  upper_link_bytes: Optional[float] = None, vector_bytes: Optional[float] = None) -> int:
    """What hnswlib allocates for an index of ``n`` elements once loaded: ``max_elements`` slots of
    level 0 and bookkeeping, the upper levels' link lists (``upper_link_bytes`` when measured from the
    file, else their expected size), a label-map entry per element and the 65,536 label locks.

    ``query`` passes the loaded index's own figures; ``plan`` the expected ones -- one formula."""
    if n <= 0:
        return 0
    vec = dim * 4 if vector_bytes is None else vector_bytes
    slots = max(int(max_elements or n), n)
    level0 = vec + 8 + 4 + 2 * M * 4
    upper = n * (4 + M * 4) / max(M - 1, 1) if upper_link_bytes is None else upper_link_bytes
    return int(math.ceil(slots * (level0 + _HNSWLIB_SLOT) + upper + n * (_HNSWLIB_LABEL + _HNSWLIB_MALLOC / M)
                         + _HNSWLIB_FIXED))


def ivf_pq_bytes(n: int, dim: int, pq_m: int, nbits: int = 8, nlist: Optional[int] = None) -> float:
    """Codes and ids for ``n`` vectors, plus the coarse centroids (nlist x dim float32) and PQ codebooks."""
    nlist = nlist or max(1, min(int(4 * math.sqrt(n)), n // 39))  # faiss_index.auto_nlist's rule
    return n * (pq_m * nbits / 8 + 8) + nlist * dim * 4 + (2 ** nbits) * dim * 4


def pgvector_hnsw_bytes_per_vector(dim: int, m: int = 16, precision: str = "float32") -> float:
    """Bytes per vector of a pgvector HNSW index: pages filled as pgvector's build fills them.

    Element and neighbour tuples go on one page when both fit, else a new page starts; levels are
    drawn as pgvector draws them (P(level >= l) = m^-l), seeded, over 20,000 elements.
    """
    value = 8 + {"float32": 4 * dim, "float16": 2 * dim, "binary": (dim + 7) // 8}[precision]
    element = _maxalign(_PG_ELEMENT_HEADER + value)
    rng = random.Random(0)
    ml = 1 / math.log(m)
    pages, free = 1, _PG_PAGE_FREE
    count = 20_000
    for _ in range(count):
        level = int(-math.log(1.0 - rng.random()) * ml)
        neighbours = _maxalign(4 + (level + 2) * m * _PG_TID)
        both = element + neighbours + 2 * _PG_ITEM_ID
        if free < both:
            pages, free = pages + 1, _PG_PAGE_FREE
        free -= both
    return pages * _PG_PAGE / count


def heap_bytes_per_vector(dim: int) -> int:
    """A pgvector ``vector(dim)`` value in the table's rows (varlena header, dim, the floats)."""
    return 8 + 4 * dim


@dataclass(frozen=True)
class ShardPlan:
    vectors_per_shard: int
    index_bytes: int  # the index structure of one shard
    ram_bytes: int  # per shard, by the storage formula
    disk_bytes: int  # per shard
    shards_per_machine: int
    machines: int
    usd_per_month: float
    embed_seconds: float
    workers: int
    store_bytes: int = 0  # the chunk store (texts, ids, metadata, its vectors) of the whole corpus


def index_structure_bytes(n: int, dim: int, kind: str, M: int = 16, pq_m: Optional[int] = None, nbits: int = 8) -> int:
    """The index structure of ``n`` vectors of one kind (float32 input)."""
    if kind == "hnsw":
        return hnswlib_bytes(n, dim, M)
    if kind == "ivf_pq":
        if not pq_m:
            raise ConfigError("kind ivf_pq needs --pq-m (sub-quantizers, a divisor of --dim, e.g. dim/8)")
        return int(math.ceil(ivf_pq_bytes(n, dim, pq_m, nbits)))
    if kind == "pgvector-hnsw":
        return int(math.ceil(n * pgvector_hnsw_bytes_per_vector(dim, M)))
    raise ConfigError(f"corpus kind {kind!r} is unknown; use one of {', '.join(CORPUS_KINDS)}")


def plan_corpus(chunks: int, dim: int, kind: str, shards: int, replicas: int, instance_ram_bytes: float,
                usd_per_hour: float, M: int = 16, pq_m: Optional[int] = None, nbits: int = 8,
                embed_per_second: float = EMBED_PER_SECOND, workers: Optional[int] = None,
                vcpus: Optional[int] = None, store_bytes_per_chunk: Optional[float] = None) -> ShardPlan:
    """RAM and disk per shard, the machines that hold ``shards x replicas`` of them, $ per month, embedding time.

    ``embed_per_second`` is per 2-core worker (as measured), so by default every machine embeds with
    ``vcpus // 2`` workers (one when its vCPUs are unknown). The chunk store's disk is ``store_bytes_per_chunk``
    per chunk (measured in the user's store, else :func:`chunk_store_bytes_per_chunk`'s estimate)."""
    if shards < 1 or replicas < 1:
        raise ConfigError("shards and replicas must be >= 1")
    n = math.ceil(chunks / shards)
    own = index_structure_bytes(n, dim, kind, M=M, pq_m=pq_m, nbits=nbits)
    backend, base = ("pgvector", "hnsw") if kind == "pgvector-hnsw" else ("hnswlib" if kind == "hnsw" else "faiss", kind)
    ram, disk = storage_bytes(own, n, dim, holds_vectors=holds_float32(backend, base, "float32"))
    if kind == "pgvector-hnsw":
        disk += n * heap_bytes_per_vector(dim)  # the vector column in the chunk table's rows
    usable = instance_ram_bytes * USABLE_RAM
    if ram > usable:
        more = f"use --shards {math.ceil(shards * ram / usable)} or more, or a larger instance"
        raise ConfigError(f"a shard needs {ram / 2**30:,.1f} GiB of RAM but the instance has {usable / 2**30:,.1f} GiB "
                          f"usable ({USABLE_RAM:.0%} of {instance_ram_bytes / 2**30:,.1f} GiB); {more}")
    per_machine = max(1, min(int(usable // ram), shards))
    machines = math.ceil(shards / per_machine) * replicas  # a replica set never shares a machine with its copy
    workers = workers or machines * max((vcpus or 2) // 2, 1)
    per_chunk = chunk_store_bytes_per_chunk(dim) if store_bytes_per_chunk is None else store_bytes_per_chunk
    return ShardPlan(n, own, ram, disk, per_machine, machines, machines * usd_per_hour * HOURS_PER_MONTH,
                     chunks / (embed_per_second * workers), workers, int(math.ceil(chunks * per_chunk)))


# A chunk's row in a DuckDB chunk store besides its float32 vector: text, ids, metadata, the documents table's
# share and DuckDB's own overhead. Measured on the eval cache's stores (254-token chunks, dim 384): SciFact's whole
# corpus 32,780,288 B for 9,920 chunks, Cranfield's 6,565,888 B for 1,858: 3,304 and 3,534 B a chunk, less 1,536
# B of vector, 1,768 and 1,998 B; the larger is used. Another chunk size or store scales it: `plan --pipeline`
# measures the user's own.
CHUNK_ROW_BYTES = 2000


def chunk_store_bytes_per_chunk(dim: int) -> float:
    """The chunk store's bytes for one chunk when nothing was measured: its row and its float32 vector."""
    return CHUNK_ROW_BYTES + 4 * dim
