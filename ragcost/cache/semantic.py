"""The semantic tier's index: cached query vectors per scope in a flat float32 matrix (exact cosine).

Rebuilt from the backend on warm-up and topped up with entries other processes wrote since;
a flat scan of a few thousand 384-d vectors is well under a millisecond.
"""

from __future__ import annotations

from typing import Optional

import numpy as np


class SemanticIndex:
    def __init__(self) -> None:
        self._ids: dict[str, list[str]] = {}
        self._rows: dict[str, list[np.ndarray]] = {}
        self._mat: dict[str, np.ndarray] = {}
        self._known: set[str] = set()

    def __len__(self) -> int:
        return len(self._known)

    def add(self, scope: str, entry_id: str, vector: np.ndarray) -> None:
        if entry_id in self._known or vector is None or not len(vector):
            return
        v = np.asarray(vector, dtype=np.float32)
        n = float(np.linalg.norm(v))
        if n == 0.0:
            return
        self._known.add(entry_id)
        self._ids.setdefault(scope, []).append(entry_id)
        self._rows.setdefault(scope, []).append(v / n)
        self._mat.pop(scope, None)

    def discard(self, entry_id: str) -> None:
        """Forget an entry (expired or evicted) so it is not offered again."""
        if entry_id not in self._known:
            return
        self._known.discard(entry_id)
        for scope, ids in self._ids.items():
            if entry_id in ids:
                i = ids.index(entry_id)
                del ids[i]
                del self._rows[scope][i]
                self._mat.pop(scope, None)
                return

    def nearest(self, scope: str, vector: np.ndarray) -> Optional[tuple[str, float]]:
        """The most similar cached query in ``scope`` and its cosine similarity; None when it has none."""
        found = self.ranked(scope, vector, 1)
        return found[0] if found else None

    def ranked(self, scope: str, vector: np.ndarray, m: int) -> list[tuple[str, float]]:
        """The ``m`` most similar cached queries in ``scope``, most similar first."""
        ids = self._ids.get(scope)
        if not ids or m < 1:
            return []
        mat = self._mat.get(scope)
        if mat is None:
            mat = self._mat[scope] = np.vstack(self._rows[scope])
        v = np.asarray(vector, dtype=np.float32)
        n = float(np.linalg.norm(v))
        if n == 0.0 or v.shape[0] != mat.shape[1]:
            return []
        sims = mat @ (v / n)
        if m == 1:
            order = [int(np.argmax(sims))]
        else:
            top = np.argpartition(-sims, min(m, len(ids)) - 1)[:m]
            order = sorted(top.tolist(), key=lambda i: -sims[i])
        return [(ids[i], float(sims[i])) for i in order]
