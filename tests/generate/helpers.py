"""Shared bits for the generate tests (fixtures are imported by name where used)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ragcost.records import Hit, QueryState

BOOK_YAML = """\
version: "gen-test.1"
as_of: 2026-11-30
queries_per_month: 1000
resources:
  cpu: {kind: time, usd_per_hour: 0.36, source: test}
  gpu: {kind: time, usd_per_hour: 7.2, source: test}
  tiny-llm: {kind: tokens, input_per_1m: 1.0, cached_input_per_1m: 0.5, output_per_1m: 2.0, source: test}
  small-llm: {kind: tokens, input_per_1m: 0.1, output_per_1m: 0.2, source: test}
  storage: {kind: storage, ram_usd_per_gb_month: 2.0, disk_usd_per_gb_month: 0.1, source: test}
"""

HITS = [
    Hit(1, "kb-1", 0.9, "Refund policy", "Customers can ask for a refund within 30 days. Write to billing to start it."),
    Hit(2, "kb-7", 0.7, "Cancel subscription", "Cancel at any time. Billing stops at the end of the current period."),
    Hit(3, "kb-3", 0.5, "Invoice download", "Invoices are PDF files in the billing section."),
]


@pytest.fixture
def book_path(tmp_path: Path) -> Path:
    p = tmp_path / "book.yaml"
    p.write_text(BOOK_YAML)
    return p


@pytest.fixture
def book(book_path):
    from ragcost.cost.pricebook import load_price_book

    return load_price_book(book_path)


@pytest.fixture
def pipeline(book, tmp_path):
    """What a stage reads from its pipeline: the default resource, the price book, the path."""
    return SimpleNamespace(resource="cpu", price_book=book, path=tmp_path / "p.yaml", base=tmp_path)


def states(n: int = 1, text: str = "how long do I have to get a refund?") -> list[QueryState]:
    return [QueryState(text=f"{text} ({i})" if n > 1 else text, id=f"q{i}", hits=list(HITS)) for i in range(n)]


def make_stage(pipeline, **params):
    from ragcost.stages.generate import Generate

    st = Generate(Generate.Params(**params), pipeline)
    st.warm_up()
    return st


def run_stage(stage, batch):
    """Run like the pipeline does: one usage record, then the per-attempt records it reported.

    The stage's ``<stage>/overhead`` records stay in each query's ``usage`` (see :func:`overheads`).
    """
    from ragcost.records import UsageRecord

    rec = UsageRecord(stage=stage.name, resource=stage.resource, items=len(batch))
    for s in batch:
        s.usage = []
    stage.run(batch, rec)
    return rec, [(s, r) for s in batch for r in s.usage if not is_overhead(r)]


def is_overhead(record) -> bool:
    from ragcost.generate.accounting import OVERHEAD

    return record.stage.endswith("/" + OVERHEAD)


def overheads(batch) -> list:
    """Each query's ``<stage>/overhead`` records, in batch order."""
    return [r for s in batch for r in s.usage if is_overhead(r)]
