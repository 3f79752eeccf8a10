"""What an index structure of ``n`` vectors allocates, kind by kind: the formulas each backend's
:class:`~ragcost.index.base.KindSpec` declares as its ``size``, which ``plan`` (no built index to
measure) and the corpus capacity model use.

Structural models of what the engine allocates, checked against measured builds by
``python -m bench.plan_ram`` (hnswlib, faiss IVF-PQ) and against faiss's own serialised size
(faiss HNSW: 1.0002x at n 20,000, dim 64, M 16 and at n 10,000, dim 384, M 32):

- hnswlib ``hnsw``: level 0 (vector, label, 2M links), the upper levels (1/(M-1) of them per
  element on average), and per element the link-list pointer, level, lock and label-map entry;
  65,536 label locks once per index.
- faiss ``flat``: the vectors; ``ivf_flat``: the vectors and an int64 id each; ``hnsw``: the
  vectors, a level and an offset per vector, and 2M + M/(M-1) int32 neighbours per vector;
  ``ivf_pq``: m x nbits/8 code bytes and an int64 id per vector, plus the coarse centroids and
  the PQ codebooks once.
- pgvector ``hnsw``: pgvector's on-disk graph, 8 KiB pages packed with element tuples (72-byte
  header + the vector) and neighbour tuples ((level + 2) x m item pointers of 6 bytes); it must
  sit in PostgreSQL's cache to be searched at speed, so it counts as RAM.

Pure arithmetic: nothing here imports an index library.
"""

from __future__ import annotations

import math
import random
from typing import Optional

from ragcost.errors import ConfigError

# Bytes per vector dimension of an index's stored vectors.
PRECISION_BYTES = {"float32": 4, "float16": 2, "int8": 1, "binary": 1 / 8}

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


def vector_bytes(dim: int, precision: str) -> float:
    """Bytes of one stored vector at ``precision``."""
    return dim * PRECISION_BYTES[precision]


def faiss_hnsw_bytes(n: int, dim: int, M: int = 16, vector_bytes: Optional[float] = None) -> float:
    """faiss ``IndexHNSW*``: the storage's vectors, a level (int32) and an offset (size_t) per vector, and
    its neighbour lists: 2M int32 at level 0 and M per upper level, 1/(M-1) upper levels on average."""
    vec = dim * 4 if vector_bytes is None else vector_bytes
    return n * (vec + 4 + 8 + 4 * (2 * M + M / max(M - 1, 1)))


# ---- the ``size`` each built-in KindSpec declares: (n, dim, precision, M, pq_m, nbits) -> bytes ----

def flat_size(n: int, dim: int, precision: str = "float32", **_) -> float:
    return n * vector_bytes(dim, precision)


def ivf_flat_size(n: int, dim: int, precision: str = "float32", **_) -> float:
    return n * (vector_bytes(dim, precision) + 8)  # inverted lists also store a 64-bit id per vector; centroids not counted


def hnswlib_size(n: int, dim: int, precision: str = "float32", M: int = 16, **_) -> float:
    return hnswlib_bytes(n, dim, M, vector_bytes=vector_bytes(dim, precision))  # as loaded: the formula query charges


def faiss_hnsw_size(n: int, dim: int, precision: str = "float32", M: int = 16, **_) -> float:
    return faiss_hnsw_bytes(n, dim, M, vector_bytes=vector_bytes(dim, precision))


def ivf_pq_size(n: int, dim: int, precision: str = "float32", pq_m: Optional[int] = None, nbits: int = 8, **_) -> float:
    if not pq_m:
        raise ConfigError("index kind ivf_pq needs pq_m (sub-quantizers, --pq-m, a divisor of the dimension), e.g. dim/8")
    return ivf_pq_bytes(n, dim, pq_m, nbits)


def pgvector_hnsw_size(n: int, dim: int, precision: str = "float32", M: int = 16, **_) -> float:
    return n * pgvector_hnsw_bytes_per_vector(dim, M, precision)
