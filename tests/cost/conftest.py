"""A small, round-numbered price book the cost tests compute by hand against."""

from __future__ import annotations

import pytest

BOOK_YAML = """\
version: "test.1"
as_of: 2026-11-30
currency: USD
queries_per_month: 1000
resources:
  cpu:
    kind: time
    usd_per_hour: 0.36
    source: test
  gpu:
    kind: time
    usd_per_hour: 7.2
    concurrency: 4
    source: test
  api:
    kind: tokens
    input_per_1m: 1.0
    cached_input_per_1m: 0.5
    output_per_1m: 2.0
    source: test
  api-nocache:
    kind: tokens
    input_per_1m: 3.0
    output_per_1m: 4.0
    source: test
  storage:
    kind: storage
    ram_usd_per_gb_month: 2.0
    disk_usd_per_gb_month: 0.1
    source: test
"""


@pytest.fixture
def book_path(tmp_path):
    p = tmp_path / "book.yaml"
    p.write_text(BOOK_YAML)
    return p


@pytest.fixture
def book(book_path):
    from ragcost.cost.pricebook import load_price_book

    return load_price_book(book_path)
