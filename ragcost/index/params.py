"""Build and search parameter models of the built-in index kinds; each backend declares which it uses.

Build parameters make the artifact; search parameters can change per query or in a sweep, so
one built index is searched at many settings.
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import Field

from ragcost.config.base import Strict


class NoParams(Strict):
    """A kind with nothing to set (flat)."""


class HNSWBuild(Strict):
    M: int = Field(16, ge=2, le=256, description="graph degree (hnswlib M / faiss HNSW M)")
    ef_construction: int = Field(200, ge=8, description="candidate list size while building")


class HNSWSearch(Strict):
    ef: int = Field(64, ge=1, description="candidate list size while searching (raised to k when smaller)")


class IVFBuild(Strict):
    nlist: Union[int, Literal["auto"]] = Field(
        "auto", description="number of coarse clusters; auto = about 4*sqrt(N), at least 39 points each"
    )


class IVFSearch(Strict):
    nprobe: int = Field(16, ge=1, description="clusters visited per query")


class IVFPQBuild(IVFBuild):
    m: int = Field(48, ge=1, description="sub-quantizers; must divide the dimension")
    nbits: int = Field(8, ge=1, le=16, description="bits per sub-quantizer code")


def boost(selectivity: float) -> float:
    """How many more candidates a native filtered search visits to find k allowed ones.

    2/selectivity, not 1/: faiss HNSW's bounded candidate list lost recall on anti-correlated
    filters at 30% with ef x 1/selectivity (bench.filters: 0.93). Capped at 32x.
    """
    return min(2.0 / max(selectivity, 1e-6), 32.0)


def raised_ef(ef: int, k: int, selectivity: float) -> dict:
    """HNSW: a wider candidate list as fewer labels are allowed (at most 4096)."""
    return {"ef": int(min(max(ef, k) * boost(selectivity), 4096))}


def raised_nprobe(nprobe: int, selectivity: float) -> dict:
    """IVF: more lists visited as fewer labels are allowed."""
    return {"nprobe": int(nprobe * boost(selectivity))}
