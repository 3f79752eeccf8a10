"""The price book: the default loads, and a bad price is refused with file:line."""

from __future__ import annotations

import pytest

from ragcost.config.loader import dump_yaml, parse_yaml
from ragcost.cost.pricebook import (
    TimeResource, TokenResource, check_resources, default_price_book_path, load_price_book, parse_price_book,
)
from ragcost.errors import ConfigError
from tests.cost.conftest import BOOK_YAML


def _line(text, needle):
    """1-based line of the first line containing ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _write(tmp_path, text):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    return p


class TestDefaultBook:
    def test_loads_with_version_date_and_sources(self):
        book = load_price_book(default_price_book_path())
        assert book.version == "2026-11-30.1" and str(book.as_of) == "2026-11-30"
        assert book.resource("openai-text-embedding-3-small").input_per_1m == 0.02
        assert book.resource("openai-text-embedding-3-large").input_per_1m == 0.13
        assert book.resource("cpu").usd_per_hour == 0.08925
        assert all(r.source.strip() for r in book.resources.values())
        assert any(isinstance(r, TokenResource) and r.cached_input_per_1m for r in book.resources.values())
        assert any(isinstance(r, TimeResource) and "gpu" in n for n, r in book.resources.items())

    def test_round_trips_through_yaml(self, book):
        again = parse_price_book(parse_yaml(dump_yaml(book)), "<dump>")
        assert again.model_dump() == book.model_dump()


class TestBadBooksAreRejectedWithFileLine:
    def test_missing_price(self, tmp_path):
        p = _write(tmp_path, BOOK_YAML.replace("    usd_per_hour: 0.36\n", ""))
        with pytest.raises(ConfigError, match=rf"{p}:{_line(BOOK_YAML, 'cpu:')}:3: resources\.cpu\.usd_per_hour: required field is missing"):
            load_price_book(p)

    def test_negative_price(self, tmp_path):
        p = _write(tmp_path, BOOK_YAML.replace("output_per_1m: 2.0", "output_per_1m: -2.0"))
        with pytest.raises(ConfigError, match=rf"{p}:{_line(BOOK_YAML, 'output_per_1m: 2.0')}:5: resources\.api\.output_per_1m: .*greater than or equal to 0"):
            load_price_book(p)

    def test_unknown_resource_kind(self, tmp_path):
        p = _write(tmp_path, BOOK_YAML.replace("kind: storage", "kind: tape"))
        with pytest.raises(ConfigError, match=rf"{p}:\d+:\d+: resources\.storage: .*'tape'"):
            load_price_book(p)

    def test_unknown_key(self, tmp_path):
        p = _write(tmp_path, BOOK_YAML.replace("    concurrency: 4\n", "    concurrency: 4\n    burst: 2\n"))
        with pytest.raises(ConfigError, match=rf"{p}:\d+:\d+: resources\.gpu\.burst: unknown key"):
            load_price_book(p)

    def test_zero_queries_per_month(self, tmp_path):
        p = _write(tmp_path, BOOK_YAML.replace("queries_per_month: 1000", "queries_per_month: 0"))
        with pytest.raises(ConfigError, match=rf"{p}:4:\d+: queries_per_month"):
            load_price_book(p)

    @pytest.mark.parametrize("price", [".inf", "1e400", ".nan", "-.inf"])
    def test_non_finite_price_is_refused_at_its_line(self, tmp_path, price):
        p = _write(tmp_path, BOOK_YAML.replace("usd_per_hour: 7.2", f"usd_per_hour: {price}"))
        line = _line(BOOK_YAML, "usd_per_hour: 7.2")
        with pytest.raises(ConfigError, match=rf"^{p}:{line}:5: resources\.gpu\.usd_per_hour: .*finite number"):
            load_price_book(p)


class TestUnknownResourceNames:
    def test_lookup_lists_the_known_ones(self, book, book_path):
        with pytest.raises(ConfigError, match=rf"unknown resource 'tpu' in {book_path}.*known: api, api-nocache, cpu, gpu, storage; add it"):
            book.resource("tpu")

    def test_pipeline_reference_is_reported_at_its_position(self, book):
        check_resources(book, {"cpu": "p.yaml:3:5"})
        with pytest.raises(ConfigError, match=r"^pipelines/x\.yaml:12:7: unknown resource 'h100'"):
            check_resources(book, {"cpu": "p.yaml:3:5", "h100": "pipelines/x.yaml:12:7"})
