"""The one place cost is computed, from usage records and a price book.

Time-priced resources. CPU (the resource declares ``vcpus``): a call pays the CPU time it
consumed, ``cpu_seconds * usd_per_hour / 3600 / vcpus`` -- a loaded host that stretches the wall
time does not raise the bill, and a stage using two threads pays two CPU-seconds per second. A
record with no ``cpu_seconds`` (built by hand, or a generate attempt timed by its own clock) falls
back to its wall time. The CPU time is shared by the record's sharers as below, but never by the
book's ``concurrency`` (consumed CPU time is already one request's own). GPU (no ``vcpus``):
busy wall time, as follows. A record is ``items`` requests that kept the instance busy for
``wall_seconds``. The busy period costs ``wall_seconds * usd_per_hour / 3600`` -- once, however
many requests shared it. The requests sharing it are ``record.shared_by`` when the runner
measured them (a batch's items plus concurrent streams), otherwise ``items * concurrency`` (the
book's declared concurrency: how many such calls the instance runs at once). One request pays
``period / sharers``; the record pays ``period * items / sharers``. So N concurrent records that
each say ``shared_by=N`` together pay the period once, never N times. A record with
``busy_share`` set pays ``period * busy_share`` instead (concurrent attempts on one endpoint, each
paying in proportion to its own duration); the shares of one period sum to 1.

Token-priced resources. ``input_tokens`` are uncached input, ``cached_input_tokens`` cached
input (``None`` = the server did not say: nothing is billed at the cached price, the uncached
count stands as reported), ``output_tokens`` output; prices are per 1M. A request's share of a
batch call is the call's cost / items.

Storage. ``GB`` is GiB (2**30 bytes). The index's RAM and disk GiB-months divided by the book's
``queries_per_month`` is what storage adds to every query.
"""

from __future__ import annotations

import uuid
from typing import Any

from ragcost.cost.pricebook import PriceBook, StorageResource, TimeResource, TokenResource
from ragcost.records import STORAGE_STAGE, UsageRecord
from ragcost.errors import ConfigError, StageError

GIB = 2**30


def by_cpu_time(record: UsageRecord, res: TimeResource) -> bool:
    """Whether the record is priced by the CPU time it consumed (a vcpus resource, CPU time measured)."""
    return res.vcpus is not None and record.cpu_seconds is not None


def sharers(record: UsageRecord, book: PriceBook) -> int:
    """How many requests shared this record's busy time (time-priced resources)."""
    res = book.resource(record.resource, f"stage {record.stage!r}")
    conc = res.concurrency if isinstance(res, TimeResource) and not by_cpu_time(record, res) else 1
    n = record.shared_by if record.shared_by is not None else record.items * conc
    if record.items < 1 or n < record.items:
        raise StageError(
            f"stage {record.stage!r}: usage record has items={record.items}, shared_by={record.shared_by}; "
            "items must be >= 1 and shared_by (requests sharing the busy time) >= items"
        )
    return n


def busy_period_cost(record: UsageRecord, book: PriceBook) -> float:
    """What the instance cost for the record's whole busy period (time-priced only): its CPU-seconds
    / vcpus on a CPU resource, else its busy wall seconds."""
    res = _resource(record, book, TimeResource)
    if by_cpu_time(record, res):
        return record.cpu_seconds * res.usd_per_hour / 3600.0 / res.vcpus
    return record.wall_seconds * res.usd_per_hour / 3600.0


def _check_share(record: UsageRecord) -> float:
    share = record.busy_share
    if not (0.0 <= share <= 1.0):  # also refuses nan
        raise StageError(f"stage {record.stage!r}: usage record has busy_share={share}; it must be within [0, 1] "
                         "(this record's part of its busy period)")
    return share


def _resource(record: UsageRecord, book: PriceBook, want: type | None = None):
    res = book.resource(record.resource, f"stage {record.stage!r}")
    if isinstance(res, StorageResource):
        raise ConfigError(
            f"stage {record.stage!r}: resource {record.resource!r} is a storage price; a stage call must use a "
            "time or tokens resource (storage enters per query via storage_cost_per_query)"
        )
    if want is not None and not isinstance(res, want):
        raise ConfigError(f"stage {record.stage!r}: resource {record.resource!r} is {res.kind}-priced, not {want.__name__}")
    return res


def token_cost(record: UsageRecord, res: TokenResource) -> float:
    """The whole call's token bill."""
    return (
        (record.input_tokens or 0) * res.input_per_1m
        + (record.cached_input_tokens or 0) * res.cached_price
        + (record.output_tokens or 0) * res.output_per_1m
    ) / 1e6


def cost_of(record: UsageRecord, book: PriceBook) -> float:
    """Dollars this record's requests pay together (all items of the call, retries and failures included)."""
    res = _resource(record, book)
    if isinstance(res, TokenResource):
        return token_cost(record, res)
    if record.busy_share is not None:
        return busy_period_cost(record, book) * _check_share(record)
    return busy_period_cost(record, book) * record.items / sharers(record, book)


def share_of(record: UsageRecord, book: PriceBook) -> float:
    """Dollars one request of this record pays."""
    res = _resource(record, book)
    if isinstance(res, TokenResource):
        return token_cost(record, res) / max(record.items, 1)
    if record.busy_share is not None:
        return busy_period_cost(record, book) * _check_share(record) / max(record.items, 1)
    return busy_period_cost(record, book) / sharers(record, book)


def storage_cost_per_query(ram_bytes: float, disk_bytes: float, book: PriceBook, resource: str = "storage") -> float:
    """Amortised $ per query of keeping the index in RAM and on disk (GiB-months / queries_per_month)."""
    res = book.resource(resource, "storage")
    if not isinstance(res, StorageResource):
        raise ConfigError(f"resource {resource!r} in {book.name} is {res.kind}-priced; storage needs kind: storage")
    monthly = ram_bytes / GIB * res.ram_usd_per_gb_month + disk_bytes / GIB * res.disk_usd_per_gb_month
    return monthly / book.queries_per_month


def new_id() -> str:
    """Ids are uuid4 hex: portable across DuckDB and PostgreSQL, no sequences."""
    return uuid.uuid4().hex


def stage_row(record: UsageRecord, book: PriceBook, call_id: str | None = None) -> dict[str, Any]:
    """The ledger row of one request of this call: the call's totals plus this request's ``cost_usd``."""
    return {
        "call_id": call_id or new_id(),
        "stage": record.stage,
        "resource": record.resource,
        "wall_seconds": float(record.wall_seconds),
        "items": record.items,
        "shared_by": sharers(record, book) if isinstance(_resource(record, book), TimeResource) else record.items,
        "calls": record.calls,
        "retries": record.retries,
        "failures": record.failures,
        "input_tokens": record.input_tokens,
        "cached_input_tokens": record.cached_input_tokens,
        "output_tokens": record.output_tokens,
        "bytes": record.bytes,
        "cpu_seconds": None if record.cpu_seconds is None else float(record.cpu_seconds),
        "busy_share": None if record.busy_share is None else float(record.busy_share),
        "tokens_estimated": bool(record.tokens_estimated),
        "node": record.node,
        "cost_usd": share_of(record, book),
    }


def storage_row(ram_bytes: float, disk_bytes: float, book: PriceBook, resource: str = "storage") -> dict[str, Any]:
    """The ledger row that charges one query its amortised index storage (no call, no latency)."""
    return {
        "call_id": new_id(),
        "stage": STORAGE_STAGE,
        "resource": resource,
        "wall_seconds": 0.0,
        "items": 1,
        "shared_by": 1,
        "calls": 0,  # not a call: kept out of latency percentiles and calls/query
        "retries": 0,
        "failures": 0,
        "input_tokens": None,
        "cached_input_tokens": None,
        "output_tokens": None,
        "bytes": int(ram_bytes + disk_bytes),
        "cpu_seconds": None,
        "busy_share": None,
        "tokens_estimated": False,
        "node": None,
        "cost_usd": storage_cost_per_query(ram_bytes, disk_bytes, book, resource),
    }
