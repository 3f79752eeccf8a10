"""The report: percentiles over calls, totals equal to the stages, zero useful said as such."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from ragcost.cli.report import parse_since, report
from ragcost.cost.ledger import Ledger
from ragcost.cost.report import aggregate, build_report, to_csv, to_json, to_rich_table
from ragcost.errors import ConfigError, StoreError


def _q(qid, ok=True, useful=0):
    return {"query_id": qid, "ok": ok, "useful": useful, "retrieved": 5}


def _s(qid, stage, wall, cost, call_id=None, items=1, calls=1, **tok):
    return {"query_id": qid, "stage": stage, "resource": "cpu", "wall_seconds": wall, "cost_usd": cost, "call_id": call_id or f"{qid}-{stage}",
            "items": items, "calls": calls, "retries": 0, "failures": 0, "input_tokens": tok.get("i"),
            "cached_input_tokens": tok.get("c"), "output_tokens": tok.get("o")}


def _fixture():
    walls = [0.1, 0.2, 0.3, 0.4, 1.0]
    qs = [_q(f"q{i}", ok=i != 4) for i in range(5)]
    ss = []
    for i, w in enumerate(walls):
        ss.append(_s(f"q{i}", "embed", 0.05, 0.001, call_id="batch", items=5))  # one batch call shared by all
        ss.append(_s(f"q{i}", "generate", w, 0.01, i=100, c=20, o=50))
    return qs, ss, walls


class TestAggregate:
    def test_percentiles_are_numpy_linear_over_calls(self):
        qs, ss, walls = _fixture()
        rep = aggregate(qs, ss)
        gen = next(r for r in rep.stages if r.stage == "generate")
        assert (gen.p50_s, gen.p95_s, gen.p99_s) == tuple(np.percentile(walls, [50, 95, 99], method="linear"))
        embed = next(r for r in rep.stages if r.stage == "embed")
        assert embed.calls == 1 and embed.p99_s == 0.05 and embed.calls_per_query == pytest.approx(0.2)
        assert gen.tokens_per_query == 170 and gen.cached_input_tokens_per_query == 20

    def test_totals_are_the_sum_of_the_stages(self):
        qs, ss, _ = _fixture()
        rep = aggregate(qs, ss)
        assert rep.totals.usd == pytest.approx(sum(r.usd for r in rep.stages), abs=1e-15)
        assert rep.totals.usd == pytest.approx(0.055)
        assert sum(r.share for r in rep.stages) == pytest.approx(1.0)
        assert rep.totals.usd_per_1k_queries == pytest.approx(0.055 / 5 * 1000)

    def test_zero_useful_is_reported_as_such(self):
        qs, ss, _ = _fixture()
        rep = aggregate(qs, ss)
        assert rep.totals.useful == 0 and rep.totals.usd_per_useful is None
        assert json.loads(to_json(rep))["totals"]["usd_per_useful"] is None
        from rich.console import Console

        con = Console(record=True, width=200)
        con.print(to_rich_table(rep))
        assert "n/a (0 useful)" in con.export_text()

    def test_each_stage_is_divided_by_the_useful_documents_of_the_queries_it_served(self):
        qs = [_q("q0", useful=3), _q("q1", useful=1), _q("q2", ok=False, useful=0)]
        ss = [_s(q, "embed", 0.05, 0.003, call_id="batch", items=3) for q in ("q0", "q1", "q2")]
        ss += [_s("q0", "generate", 0.2, 0.02), _s("q1", "generate", 0.3, 0.04)]  # q2 was blocked before generate
        ss += [_s("q2", "guard", 0.01, 0.001)]  # only q2, which delivered nothing
        rep = aggregate(qs, ss)
        by = {r.stage: r for r in rep.stages}
        assert (by["embed"].useful, by["embed"].usd_per_useful) == (4, pytest.approx(0.009 / 4))
        assert (by["generate"].useful, by["generate"].usd_per_useful) == (4, pytest.approx(0.06 / 4))
        assert (by["guard"].useful, by["guard"].usd_per_useful) == (0, None)
        assert rep.totals.usd_per_useful == pytest.approx((0.009 + 0.06 + 0.001) / 4)
        data = json.loads(to_json(rep))
        assert {r["stage"]: r["usd_per_useful"] for r in data["stages"]}["guard"] is None
        rows = {line.split(",")[0]: line for line in to_csv(rep).splitlines()}
        header = rows["stage"].split(",")
        gen = dict(zip(header, rows["generate"].split(",")))
        total = dict(zip(header, rows["(total)"].split(",")))
        assert int(gen["useful"]) == 4 and float(gen["usd_per_useful"]) == pytest.approx(0.015)
        assert int(total["useful"]) == 4 and float(total["usd_per_useful"]) == pytest.approx(0.07 / 4)
        assert header.count("useful") == 1
        from rich.console import Console

        con = Console(record=True, width=200)
        con.print(to_rich_table(rep))
        guard_line = [line for line in con.export_text().splitlines() if line.startswith("guard")][-1]  # the per-useful table
        assert "n/a (0 useful)" in guard_line

    def test_per_successful_exceeds_per_request_when_failures_exist(self):
        qs, ss, _ = _fixture()
        t = aggregate(qs, ss).totals
        assert t.successful == 4
        assert t.usd_per_successful == pytest.approx(t.usd / 4) and t.usd_per_successful > t.usd_per_request

    def test_empty_selection_has_no_divisions(self):
        t = aggregate([], []).totals
        assert (t.usd, t.usd_per_1k_queries, t.usd_per_successful, t.usd_per_useful) == (0, None, None, None)

    def test_csv_has_a_total_row(self):
        qs, ss, _ = _fixture()
        lines = to_csv(aggregate(qs, ss)).splitlines()
        assert lines[0].startswith("stage,calls,") and lines[-1].startswith("(total),")
        assert len(lines) == 4


@pytest.fixture
def ledger_url(tmp_path):
    url = f"duckdb:///{tmp_path}/l.duckdb"
    qs, ss, _ = _fixture()
    with Ledger(url) as led:
        run = led.start_run("query", "kb", "v")
        for q in qs:
            rows = [{k: v for k, v in s.items() if k != "query_id"} for s in ss if s["query_id"] == q["query_id"]]
            led.record_query(run, {**q, "useful": 2}, rows)
    return url


class TestCli:
    def _app(self):
        app = typer.Typer()
        app.command()(report)
        app.command("noop")(lambda: None)  # two commands keep `report` a subcommand
        return app

    def test_json(self, ledger_url):
        res = CliRunner().invoke(self._app(), ["report", "--ledger", ledger_url, "--json", "--pipeline", "kb"])
        assert res.exit_code == 0, res.output
        data = json.loads(res.output)
        assert data["totals"]["queries"] == 5 and data["totals"]["usd_per_useful"] == pytest.approx(0.055 / 10)
        assert data["percentile_method"] == "linear"

    def test_csv_and_table(self, ledger_url):
        res = CliRunner().invoke(self._app(), ["report", "--ledger", ledger_url, "--csv"])
        assert res.exit_code == 0 and res.output.splitlines()[-1].startswith("(total),")
        res = CliRunner().invoke(self._app(), ["report", "--ledger", ledger_url])
        assert res.exit_code == 0 and "$ per useful retrieved document" in res.output

    def test_other_pipeline_is_empty(self, ledger_url):
        res = CliRunner().invoke(self._app(), ["report", "--ledger", ledger_url, "--pipeline", "nope"])
        assert res.exit_code == 0 and "no queries" in res.output
        assert build_report(ledger_url, pipeline="nope").totals.queries == 0

    def test_missing_ledger_raises_a_ragcost_error(self, tmp_path):
        res = CliRunner().invoke(self._app(), ["report", "--ledger", f"duckdb:///{tmp_path}/none.duckdb"])
        assert isinstance(res.exception, StoreError) and "no ledger at" in str(res.exception)

    def test_json_and_csv_are_exclusive(self, ledger_url):
        res = CliRunner().invoke(self._app(), ["report", "--ledger", ledger_url, "--json", "--csv"])
        assert isinstance(res.exception, ConfigError)


class TestSince:
    def test_relative_and_iso(self):
        from datetime import datetime, timezone

        now = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
        assert parse_since("24h", now) == datetime(2026, 11, 29, 12, tzinfo=timezone.utc)
        assert parse_since("2026-11-01", now) == datetime(2026, 11, 1, tzinfo=timezone.utc)
        with pytest.raises(ConfigError, match="--since 'yesterday'"):
            parse_since("yesterday", now)


class TestReportIsReadOnly:
    def test_report_on_a_new_sqlite_url_creates_no_file(self, tmp_path):
        path = tmp_path / "new.db"
        with pytest.raises(StoreError, match="no ledger at"):
            build_report(f"sqlite:///{path}")
        assert not path.exists()

    def test_report_on_a_store_without_ledger_tables_adds_none(self, tmp_path):
        import duckdb

        path = tmp_path / "store.duckdb"
        duckdb.connect(str(path)).execute("CREATE TABLE documents (id VARCHAR)").close()
        with pytest.raises(StoreError, match="no ledger tables in .*run `ragcost query` first"):
            build_report(f"duckdb:///{path}")
        con = duckdb.connect(str(path))
        assert [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()] == ["documents"]
        con.close()


def _probe_ledger(usd_per_query=1.12003e-05, share_nan=False):
    """Five stages, cheap ones in the 1e-5..1e-7 range: the shape that lost its exponent at 80 columns."""
    qs = [_q("q0", useful=1)]
    costs = {"embed": usd_per_query, "retrieve": 2.5e-07, "rerank": 3.3e-06, "guard": 4.0e-07, "generate": 0.0123}
    ss = [_s("q0", st, 0.0123 * (i + 1), c, i=1234, o=56) for i, (st, c) in enumerate(costs.items())]
    return qs, ss


def _render(rep, width):
    from rich.console import Console

    con = Console(record=True, width=width)
    con.print(to_rich_table(rep))
    return con.export_text()


class TestDollarsKeepTheirValueAtAnyWidth:
    def test_report_at_80_columns_shows_the_exponent(self):
        text = _render(aggregate(*_probe_ledger()), 80)
        assert "…" not in text
        assert "$1.120e-05" in text and "$2.500e-07" in text

    def test_a_column_uses_one_notation(self):
        from ragcost.cost.fmt import money_column

        assert money_column([1.12e-05, 0.0123]) == ["$1.120e-05", "$1.230e-02"]
        assert money_column([0.00123, 0.5, None]) == ["$0.001230", "$0.500000", "n/a"]
        assert money_column([12.5, 0.0]) == ["$12.50", "$0.00"]

    def test_too_narrow_a_terminal_folds_numbers_rather_than_cutting_them(self):
        text = _render(aggregate(*_probe_ledger()), 50)
        assert "…" not in text
        assert "$1.12" in text and "e-05" in text  # folded onto two lines, every digit kept


class TestJsonIsAlwaysJson:
    def test_non_finite_dollars_become_null_not_infinity(self):
        qs, ss = _probe_ledger()
        ss[0]["cost_usd"] = float("inf")  # a ledger written before prices had to be finite
        out = to_json(aggregate(qs, ss))
        data = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
        assert data["totals"]["usd"] is None and data["stages"][0]["usd"] is None
        assert "NaN" not in out and "Infinity" not in out

    def test_non_finite_share_prints_a_dash_not_nan_percent(self):
        qs, ss = _probe_ledger()
        ss[0]["cost_usd"] = float("inf")
        text = _render(aggregate(qs, ss), 120)
        assert "nan%" not in text and "$inf" not in text


def test_the_bill_and_the_totals_divide_by_one_useful_count_the_judges_expected_one(tmp_path):
    """A calibrated judge writes expected counts (0.4, 1.3, ...); the rounded integer column is a display. The
    totals' $/useful and the bill's marginal $/useful are one figure over the expected sum, in JSON and on screen."""
    url = f"duckdb:///{tmp_path}/l.duckdb"
    qs, ss, _ = _fixture()
    expected = [0.4, 1.3, 0.6, 2.45, 0.2]  # rounded: 0, 1, 1, 2, 0 -> 4; expected sum 4.95
    with Ledger(url) as led:
        run = led.start_run("query", "kb", "v")
        for q, e in zip(qs, expected):
            rows = [{k: v for k, v in s.items() if k != "query_id"} for s in ss if s["query_id"] == q["query_id"]]
            led.record_query(run, {**q, "useful": e}, rows)
    app = typer.Typer()
    app.command()(report)
    app.command("noop")(lambda: None)
    res = CliRunner().invoke(app, ["report", "--ledger", url, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["totals"]["useful"] == pytest.approx(sum(expected))
    assert data["bill"]["useful"] == pytest.approx(sum(expected))
    assert data["bill"]["usd_per_useful_marginal"] == pytest.approx(data["totals"]["usd_per_useful"], rel=1e-9)
    # the per-stage table: a stage that served every query counts the same useful documents (int() of each made 3)
    served_all = [r for r in data["stages"] if r["stage"] == "embed"]
    assert served_all and served_all[0]["useful"] == pytest.approx(sum(expected))
    text = CliRunner().invoke(app, ["report", "--ledger", url]).output
    assert "(4.95 useful)" in text
