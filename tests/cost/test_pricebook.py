"""The price book: the default loads, and a bad price is refused with file:line."""

from __future__ import annotations

import pytest

from ragcost.config.loader import dump_yaml, parse_yaml
from datetime import date
from pathlib import Path

from ragcost.cost.pricebook import (
    TimeResource, TokenResource, book_age, check_resources, default_price_book_path, load_price_book,
    parse_price_book, price_date, stale_warning, today_utc,
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
        assert book.version == "2026-12-01.1" and book.max_age_days == 365
        assert book.resource("openai-text-embedding-3-small").input_per_1m == 0.02
        assert book.resource("openai-text-embedding-3-large").input_per_1m == 0.13
        assert book.resource("cpu").usd_per_hour == 0.08925
        assert all(r.source.strip() for r in book.resources.values())
        assert any(isinstance(r, TokenResource) and r.cached_input_per_1m for r in book.resources.values())
        assert any(isinstance(r, TimeResource) and "gpu" in n for n, r in book.resources.items())

    def test_every_price_has_its_own_date_and_a_named_source(self):
        book = load_price_book(default_price_book_path())
        for name, r in book.resources.items():
            assert r.as_of is not None and r.as_of < book.as_of, name  # taken before the book was revised
            assert "http" in r.source or "page" in r.source, name
        # The dates the sources state, not the date the book was compiled.
        assert price_date(book, "openai-text-embedding-3-small") == date(2024, 1, 25)
        assert price_date(book, "openai-gpt-4o-mini") == date(2024, 10, 1)
        assert "date unknown" in book.resource("gpu-h100").note

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
        with pytest.raises(ConfigError, match=rf"^{p}:{line}:5: resources\.gpu\.usd_per_hour: .*finite number .*; write a plain number"):
            load_price_book(p)


    def test_empty_source_is_refused_at_its_line(self, tmp_path):
        text = BOOK_YAML.replace("    source: test\n", '    source: ""\n', 1)
        p = _write(tmp_path, text)
        line = _line(text, 'source: ""')
        with pytest.raises(ConfigError, match=rf"^{p}:{line}:5: resources\.cpu\.source: is empty; name the URL or document"):
            load_price_book(p)

    def test_blank_source_is_refused_too(self, tmp_path):
        p = _write(tmp_path, BOOK_YAML.replace("    source: test\n", "    source: '   '\n", 1))
        with pytest.raises(ConfigError, match=r"resources\.cpu\.source: is empty"):
            load_price_book(p)

    @pytest.mark.parametrize("when,why", [("2999-01-01", "in the future"), ("1999-12-31", "before 2000-01-01")])
    def test_a_price_date_in_the_future_or_before_2000_is_refused(self, tmp_path, when, why):
        text = BOOK_YAML.replace("    usd_per_hour: 0.36\n", f"    usd_per_hour: 0.36\n    as_of: {when}\n")
        p = _write(tmp_path, text)
        line = _line(text, f"as_of: {when}")
        with pytest.raises(ConfigError, match=rf"^{p}:{line}:5: resources\.cpu\.as_of: {when} is {why}; use the date"):
            load_price_book(p)

    def test_a_price_newer_than_its_book_is_refused_at_its_line(self, tmp_path):
        text = BOOK_YAML.replace("    usd_per_hour: 0.36\n", "    usd_per_hour: 0.36\n    as_of: 2026-12-01\n")
        p = _write(tmp_path, text)
        line = _line(text, "as_of: 2026-12-01")
        with pytest.raises(ConfigError, match=rf"^{p}:{line}:5: resources\.cpu\.as_of: 2026-12-01 is after the book's as_of 2026-11-30"):
            load_price_book(p)

    def test_a_book_date_in_the_future_is_refused(self, tmp_path):
        p = _write(tmp_path, BOOK_YAML.replace("as_of: 2026-11-30", "as_of: 2999-01-01"))
        with pytest.raises(ConfigError, match=rf"^{p}:2:1: as_of: 2999-01-01 is in the future"):
            load_price_book(p)

    def test_zero_max_age_is_refused(self, tmp_path):
        p = _write(tmp_path, BOOK_YAML.replace("currency: USD\n", "currency: USD\nmax_age_days: 0\n"))
        with pytest.raises(ConfigError, match=rf"^{p}:4:1: max_age_days: .*greater than 0"):
            load_price_book(p)


class TestAge:
    def test_a_price_without_its_own_date_takes_the_books(self, book):
        assert price_date(book, "cpu") == date(2026, 11, 30)

    def test_prices_older_than_max_age_are_listed_oldest_first(self, tmp_path):
        text = BOOK_YAML.replace("    usd_per_hour: 7.2\n", "    usd_per_hour: 7.2\n    as_of: 2024-01-01\n")
        text = text.replace("    output_per_1m: 2.0\n", "    output_per_1m: 2.0\n    as_of: 2025-06-01\n")
        book = load_price_book(_write(tmp_path, text))
        age = book_age(book, today=date(2026, 12, 1))
        assert age["version"] == "test.1" and age["as_of"] == "2026-11-30" and age["max_age_days"] == 365
        assert age["oldest_price"] == {"resource": "gpu", "as_of": "2024-01-01", "age_days": 1065}
        assert [s["resource"] for s in age["stale"]] == ["gpu", "api"]
        line = stale_warning(age)
        assert "\n" not in line and "2 price(s)" in line and "gpu (2024-01-01, 1065 days)" in line
        assert "older than max_age_days 365" in line

    def test_no_warning_when_every_price_is_recent(self, book):
        age = book_age(book, today=date(2026, 12, 1))
        assert age["stale"] == [] and stale_warning(age) is None

    def test_the_default_book_is_stale_today_and_says_so(self):
        age = book_age(load_price_book(default_price_book_path()))
        assert {s["resource"] for s in age["stale"]} >= {"cpu", "gpu-h100", "openai-gpt-4o-mini"}


class TestUnknownResourceNames:
    def test_lookup_lists_the_known_ones(self, book, book_path):
        with pytest.raises(ConfigError, match=rf"unknown resource 'tpu' in {book_path}.*known: api, api-nocache, cpu, gpu, storage; add it"):
            book.resource("tpu")

    def test_pipeline_reference_is_reported_at_its_position(self, book):
        check_resources(book, {"cpu": "p.yaml:3:5"})
        with pytest.raises(ConfigError, match=r"^pipelines/x\.yaml:12:7: unknown resource 'h100'"):
            check_resources(book, {"cpu": "p.yaml:3:5", "h100": "pipelines/x.yaml:12:7"})


class TestReportShowsTheBook:
    """``ragcost report`` shows the book's version and age, and warns about stale prices."""

    @pytest.fixture
    def ledger_url(self, tmp_path):
        from ragcost.cost.ledger import Ledger

        url = f"duckdb:///{tmp_path}/l.duckdb"
        with Ledger(url) as led:
            run = led.start_run("query", "kb", "test.1")
            led.record_query(run, {"query_id": "q1", "ok": True, "useful": 1, "retrieved": 3},
                             [{"stage": "embed", "resource": "cpu", "wall_seconds": 0.01, "cost_usd": 0.001}])
        return url

    def _report(self, capsys, *args):
        import json

        from ragcost.cli.main import main

        code = main(["report", *[str(a) for a in args]])
        out, err = capsys.readouterr()
        return code, (json.loads(out) if "--json" in args else out), err

    def test_json_has_version_age_and_no_warning_for_a_recent_book(self, capsys, ledger_url, book_path):
        code, data, err = self._report(capsys, "--ledger", ledger_url, "--json", "--pricing", book_path)
        assert code == 0, err
        pb = data["price_book"]
        assert pb["version"] == "test.1" and pb["as_of"] == "2026-11-30" and pb["max_age_days"] == 365
        assert pb["oldest_price"]["age_days"] == (today_utc() - date(2026, 11, 30)).days
        assert pb["ledger_versions"] == ["test.1"] and pb["stale"] == [] and pb["warnings"] == []

    def test_a_stale_price_warns_in_json_and_on_the_terminal(self, capsys, ledger_url, tmp_path):
        text = BOOK_YAML.replace("    usd_per_hour: 7.2\n", "    usd_per_hour: 7.2\n    as_of: 2024-01-01\n")
        p = _write(tmp_path, text)
        code, data, _ = self._report(capsys, "--ledger", ledger_url, "--json", "--pricing", p)
        assert code == 0 and [s["resource"] for s in data["price_book"]["stale"]] == ["gpu"]
        assert len(data["price_book"]["warnings"]) == 1 and "gpu (2024-01-01" in data["price_book"]["warnings"][0]
        code, out, err = self._report(capsys, "--ledger", ledger_url, "--pricing", p)
        assert code == 0 and "version test.1" in out and "oldest price gpu as of 2024-01-01" in out
        assert err.count("\n") == 1 and err.startswith("warning: 1 price(s)") and "older than max_age_days 365" in err

    def test_a_ledger_priced_with_another_version_is_said(self, capsys, ledger_url):
        code, data, _ = self._report(capsys, "--ledger", ledger_url, "--json")  # the default book
        assert code == 0 and data["price_book"]["version"] == "2026-12-01.1"
        assert any("priced with price book version(s) test.1" in w for w in data["price_book"]["warnings"])


class TestTheDefaultBookShipsInThePackage:
    """issue 42 item 7: the default price book was in the repository only, so an installed ragcost had none."""

    def test_it_is_inside_the_package_and_the_repositorys_file_is_the_same_book(self):
        import ragcost

        p = default_price_book_path()
        assert Path(ragcost.__file__).parent in p.parents and p.is_file()
        repo = Path(__file__).resolve().parents[2] / "pricing" / "default.yaml"
        assert repo.resolve() == p.resolve()  # the repository's path links to it: one file, never two to keep in step

    def test_a_pipeline_without_pricing_and_no_pricing_folder_gets_it(self, tmp_path, monkeypatch):
        import json

        import tests.evaluate.conftest  # noqa: F401  (registers the test-hashing embedder)
        from ragcost.runtime.pipeline import Pipeline

        (tmp_path / "pipe.yaml").write_text(json.dumps({"name": "p", "store": f"duckdb:///{tmp_path / 's.duckdb'}",
                                                         "embed": {"type": "test-hashing"}}))
        monkeypatch.chdir(tmp_path)
        pipe = Pipeline.load(tmp_path / "pipe.yaml", judge=False)
        try:
            assert pipe.price_book_path == default_price_book_path()
            assert pipe.price_book.version == load_price_book(default_price_book_path()).version
        finally:
            pipe.close()
        (tmp_path / "pipe.yaml").write_text(json.dumps({"name": "p", "embed": {"type": "test-hashing"}, "pricing": "mine.yaml"}))
        with pytest.raises(ConfigError, match="mine.yaml.*not found"):
            Pipeline.load(tmp_path / "pipe.yaml", judge=False).price_book_path  # a named book is never replaced

    def test_a_built_wheel_carries_it(self, tmp_path):
        import subprocess
        import sys
        import zipfile

        root = Path(__file__).resolve().parents[2]
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(root)],
                       check=True, capture_output=True, timeout=300)
        (wheel,) = tmp_path.glob("ragcost-*.whl")
        assert "ragcost/cost/books/default.yaml" in zipfile.ZipFile(wheel).namelist()
