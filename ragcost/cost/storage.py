"""The one storage formula: the bytes an index keeps in RAM and on disk, as query, eval and plan charge them."""

from __future__ import annotations

from typing import Optional

LABEL_BYTES = 8  # int64 chunk labels, saved beside the index
EXACT_COPY_BYTES = 4  # float32 per dimension: the exact-scan copy kept beside the index


def storage_bytes(index_bytes: int, vector_count: int, dim: int, file_bytes: Optional[int] = None,
                  extra_ram: int = 0, extra_disk: int = 0) -> tuple[int, int]:
    """(RAM, disk) bytes: the index, plus the float32 exact-scan copy that filtered search and
    re-scoring read, plus ``extra`` (a BM25 index, the store's tables). ``file_bytes`` is what the
    artifact measured on disk; without files (an eval candidate) disk is RAM plus the labels."""
    ram = int(index_bytes) + int(vector_count) * int(dim) * EXACT_COPY_BYTES
    disk = int(file_bytes) if file_bytes is not None else ram + int(vector_count) * LABEL_BYTES
    return ram + int(extra_ram), disk + int(extra_disk)
