"""Capacity of a whole corpus: RAM and disk per shard, machines of a price-book instance, $ per month, build time.

Pure functions over numbers; ``ragcost plan --chunks N --dim D --kind K --shards S --replicas R``
prints them beside their inputs. The bytes of each kind's structure are what its backend declares
(:attr:`ragcost.index.KindSpec.size`; the built-ins' formulas, structural models checked against
measured builds by ``python -m bench.plan_ram``, are in :mod:`ragcost.index.sizes`), so an index
backend from a plugin is planned by its own formula. ``--kind`` names a kind of the default backend
(hnsw: hnswlib, the others: faiss), ``--backend`` another; ``pgvector-hnsw`` is pgvector's hnsw,
whose vector column in the chunk table is added to the disk.

RAM and disk then follow the one storage formula (``ragcost.cost.storage``): the serving process's
float32 exact-scan copy is RAM unless the index itself holds every vector at float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ragcost.cost.storage import holds_float32, storage_bytes
from ragcost.errors import ConfigError

# ``--kind pgvector-hnsw``: pgvector's hnsw (the vector column in the chunk table counts as disk too).
ALIASES = {"pgvector-hnsw": ("pgvector", "hnsw")}
HOURS_PER_MONTH = 730
# Share of an instance's memory the index may fill: the OS, the query process and page cache keep the rest.
USABLE_RAM = 0.8
# Texts (chunks) per second one 2-core CPU worker embeds with all-MiniLM-L6-v2 through ragcost:
# `python -m bench.embed`, sentence-transformers (torch), README "Embedding runtimes" (18.1 texts/s).
EMBED_PER_SECOND = 18.1

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


def in_store(backend: str) -> bool:
    """Whether the backend's index lives in the store's database (pgvector): its vectors are a column there."""
    from ragcost.index import index_registry

    return bool(getattr(index_registry.get(backend), "store_schemes", ()))


def backend_kind(kind: str, backend: Optional[str] = None) -> tuple[str, str]:
    """(backend, kind) a corpus plan means: an alias (``pgvector-hnsw``), else ``backend`` or the kind's default."""
    from ragcost.index.check import DEFAULT_BACKEND

    if kind in ALIASES and backend is None:
        return ALIASES[kind]
    return backend or DEFAULT_BACKEND.get(kind, "faiss"), kind


def index_structure_bytes(n: int, dim: int, kind: str, M: int = 16, pq_m: Optional[int] = None, nbits: int = 8,
                          backend: Optional[str] = None) -> int:
    """The index structure of ``n`` float32 vectors of one kind: its backend's declared size."""
    from ragcost.cost.plan import index_bytes

    name, base = backend_kind(kind, backend)
    return int(math.ceil(index_bytes(n, dim, "float32", base, M=M, pq_m=pq_m, nbits=nbits, backend=name)))


def plan_corpus(chunks: int, dim: int, kind: str, shards: int, replicas: int, instance_ram_bytes: float,
                usd_per_hour: float, M: int = 16, pq_m: Optional[int] = None, nbits: int = 8,
                embed_per_second: float = EMBED_PER_SECOND, workers: Optional[int] = None,
                vcpus: Optional[int] = None, store_bytes_per_chunk: Optional[float] = None,
                backend: Optional[str] = None) -> ShardPlan:
    """RAM and disk per shard, the machines that hold ``shards x replicas`` of them, $ per month, embedding time.

    ``embed_per_second`` is per 2-core worker (as measured), so by default every machine embeds with
    ``vcpus // 2`` workers (one when its vCPUs are unknown). The chunk store's disk is ``store_bytes_per_chunk``
    per chunk (measured in the user's store, else :func:`chunk_store_bytes_per_chunk`'s estimate)."""
    if shards < 1 or replicas < 1:
        raise ConfigError("shards and replicas must be >= 1")
    n = math.ceil(chunks / shards)
    own = index_structure_bytes(n, dim, kind, M=M, pq_m=pq_m, nbits=nbits, backend=backend)
    name, base = backend_kind(kind, backend)
    ram, disk = storage_bytes(own, n, dim, holds_vectors=holds_float32(name, base, "float32"))
    if in_store(name):
        from ragcost.index.sizes import heap_bytes_per_vector

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
