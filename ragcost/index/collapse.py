"""The one per-document collapse: keep each document's best chunk, in score order, up to k per row.

Used by the retrieve stage (every batch) and by `ragcost eval` (every measured query).
"""

from __future__ import annotations

from array import array
from typing import Any, Optional, Sequence

import numpy as np


class DocMap:
    """label -> document ordinal of every chunk an index holds (``names[ordinal]`` is the document).

    Retrieval reads it once from the store (the artifact's fingerprint pins the corpus revision,
    so it is valid for the artifact's life); evaluation builds it from the eval corpus. It lets
    the per-document collapse run in numpy.
    """

    def __init__(self, labels: np.ndarray, doc_ids: Sequence[Any]) -> None:
        index: dict[Any, int] = {}
        ords = np.fromiter((index.setdefault(d, len(index)) for d in doc_ids), dtype=np.int32, count=len(doc_ids))
        self.names: list[Any] = list(index)
        self._build(np.asarray(labels, dtype=np.int64), ords)

    @classmethod
    def from_ordinals(cls, labels: np.ndarray, ords: np.ndarray, names: Sequence[Any]) -> "DocMap":
        """A map whose ordinals are given (e.g. positions in a sorted list of document ids)."""
        self = cls.__new__(cls)
        self.names = list(names)
        self._build(np.asarray(labels, dtype=np.int64), np.asarray(ords, dtype=np.int32))
        return self

    def _build(self, labels: np.ndarray, ords: np.ndarray) -> None:
        top = int(labels.max()) if len(labels) else -1
        self._dense: Optional[np.ndarray] = None
        if len(labels) == 0 or (int(labels.min()) >= 0 and top < 8 * len(labels) + (1 << 20)):
            # Store labels are dense autoincrement ids: a lookup table. Its last slot stays -1, and both
            # "no result" (-1) and labels above the top are sent there.
            dense = np.full(top + 2, -1, dtype=np.int32)
            dense[labels] = ords
            self._top = top + 1
            # One table, two views: an array.array, which Python indexes with a plain C lookup (several
            # times cheaper than ndarray.item on the single-query path), and numpy over the same memory.
            self._table = array("i")
            self._table.frombytes(dense.tobytes())
            self._dense = np.frombuffer(self._table, dtype=f"i{self._table.itemsize}")
        else:
            order = np.argsort(labels, kind="stable")
            self._sorted, self._ords = labels[order], ords[order]

    def ords_list(self, labels: list[int]) -> list[int]:
        """``ords`` for a short Python list: per-item lookups cost less than building arrays."""
        if self._dense is None:
            return self.ords(np.asarray(labels, dtype=np.int64)).tolist()
        table, top = self._table, self._top
        return [table[lb] if lb < top else -1 for lb in labels]  # -1 -> the table's last slot, which is -1

    def ords(self, labels: np.ndarray) -> np.ndarray:
        """Document ordinal of each label (any shape); -1 for no result or a label the store lacks."""
        if self._dense is not None:
            return self._dense[np.minimum(labels, self._top)]
        if len(self._sorted) == 0:
            return np.full(labels.shape, -1, dtype=np.int32)
        pos = np.minimum(np.searchsorted(self._sorted, labels), len(self._sorted) - 1)
        return np.where(self._sorted[pos] == labels, self._ords[pos], -1).astype(np.int32, copy=False)


def collapse(scores: np.ndarray, labels: np.ndarray, docs: DocMap, ks: np.ndarray, kmax: int,
             per_doc: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Keep, per row and in score order, results whose chunk the store knows (and, per document, each
    document's best chunk), up to that row's k. All in numpy: no Python loop over results."""
    d = docs.ords(labels)
    keep = d >= 0
    if per_doc and d.shape[1] > 1:
        # First occurrence of each document in a row: a stable sort puts a document's chunks
        # together in score order, and the first of each run is its best.
        order = np.argsort(d, axis=1, kind="stable")
        sd = np.take_along_axis(d, order, axis=1)
        first = np.empty_like(keep)
        first[:, 0] = True
        np.not_equal(sd[:, 1:], sd[:, :-1], out=first[:, 1:])
        best = np.empty_like(keep)
        np.put_along_axis(best, order, first, axis=1)
        keep &= best
    width = min(kmax, labels.shape[1])
    if keep[:, :width].all():  # the usual case: the first k results are all wanted
        lb, sc, dd = labels[:, :width], scores[:, :width], d[:, :width]
        counts = np.minimum(ks, width)
    else:
        pick = np.argsort(~keep, axis=1, kind="stable")[:, :width]
        lb = np.take_along_axis(labels, pick, axis=1)
        sc = np.take_along_axis(scores, pick, axis=1)
        dd = np.take_along_axis(d, pick, axis=1)
        counts = np.minimum(keep.sum(axis=1), ks)
        pad = np.arange(width)[None, :] >= counts[:, None]
        lb = np.where(pad, -1, lb)
        sc = np.where(pad, -np.inf, sc).astype(np.float32, copy=False)
        dd = np.where(pad, -1, dd)
    return lb, sc, dd, counts
