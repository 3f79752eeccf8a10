"""When two runs give the same answer basis: the cited documents agree, and the top-k documents overlap enough."""

from __future__ import annotations

from typing import Sequence


def overlap(a: Sequence[str], b: Sequence[str]) -> float:
    """|A ∩ B| / max(|A|, |B|) over document ids (1.0 when both are empty)."""
    sa, sb = set(a), set(b)
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / max(len(sa), len(sb))


def same_basis(cached_docs: Sequence[str], cached_cited: Sequence[str], fresh_docs: Sequence[str],
               min_overlap: float) -> bool:
    """A cached answer is correct for a fresh run when every document it cites is in the fresh run's
    context and the two top-k lists overlap by at least ``min_overlap`` (1.0: the same documents)."""
    if not set(cached_cited) <= set(fresh_docs):
        return False
    return overlap(cached_docs, fresh_docs) >= min_overlap
