"""Build and search parameters of the pgvector backend, named as pgvector names them.

Build: ``m`` and ``ef_construction`` (HNSW), ``lists`` (IVFFlat), each ``CREATE INDEX ... WITH (...)``.
Search: ``ef_search`` (``hnsw.ef_search``), ``probes`` (``ivfflat.probes``), and the iterative scan
that lets a selective filter in the same statement still find k rows.
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import Field, model_validator

from ragcost.config.base import Strict

IterativeScan = Literal["relaxed_order", "strict_order", "off"]


class PgFlatSearch(Strict):
    """No index: PostgreSQL scores every (allowed) row, exactly."""


class PgHNSWBuild(Strict):
    m: int = Field(16, ge=2, le=100, description="graph degree (pgvector hnsw m, 2..100)")
    ef_construction: int = Field(64, ge=4, le=1000, description="candidate list size while building (pgvector default 64)")

    @model_validator(mode="after")
    def _ef_at_least_2m(self) -> "PgHNSWBuild":
        if self.ef_construction < 2 * self.m:
            raise ValueError(f"ef_construction {self.ef_construction} must be at least 2 x m = {2 * self.m} "
                             "(pgvector refuses less); raise ef_construction or lower m")
        return self


class PgHNSWSearch(Strict):
    ef_search: int = Field(40, ge=1, le=1000, description="hnsw.ef_search: candidate list size (raised to k when smaller)")
    iterative_scan: IterativeScan = Field("relaxed_order", description="hnsw.iterative_scan: keep walking the graph "
                                          "until k rows pass the filter (results re-sorted here)")
    max_scan_tuples: int = Field(20000, ge=1, description="hnsw.max_scan_tuples: where an iterative scan gives up")


class PgIVFBuild(Strict):
    lists: Union[int, Literal["auto"]] = Field("auto", description="IVFFlat lists; auto = rows/1000 up to 1M rows, "
                                               "sqrt(rows) above (pgvector's advice), at least 1")


class PgIVFSearch(Strict):
    probes: int = Field(10, ge=1, description="ivfflat.probes: lists visited per query")
    iterative_scan: IterativeScan = Field("relaxed_order", description="ivfflat.iterative_scan: visit more lists "
                                          "until k rows pass the filter")
    max_probes: int = Field(0, ge=0, description="ivfflat.max_probes for an iterative scan; 0 = all lists")


def auto_lists(n: int) -> int:
    """pgvector's advice: rows / 1000 up to 1M rows, sqrt(rows) above; at least 1."""
    return max(1, n // 1000 if n <= 1_000_000 else int(n ** 0.5))
