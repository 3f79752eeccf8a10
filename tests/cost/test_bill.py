"""The bill: provisioned hours from recorded lifetimes and the fleet, fully loaded beside marginal, on DuckDB and PostgreSQL.

The reconciliation writes a known world -- a server's lifetime of exactly 2 h (start, heartbeats,
stop), two workers of it on one host, a fleet GPU the book declares always on, queries inside that
window with measured-shape rows -- and checks ``report --json`` against sums written out here from
that world (hours x $/h, CPU-seconds / vCPUs), not against the formula in ragcost.cost.bill.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

import pytest
import typer
from typer.testing import CliRunner

from ragcost.cli.report import report
from ragcost.cost.bill import build_bill, merged_hours, provisioned_hours
from ragcost.cost.compute import stage_row, storage_row
from ragcost.cost.ledger import Ledger
from ragcost.cost.pricebook import load_price_book
from ragcost.errors import ConfigError
from ragcost.records import UsageRecord

T0 = datetime(2026, 11, 30, 10, 0, 0)
H = timedelta(hours=1)
BOOK = """\
version: "bill.1"
as_of: 2026-11-30
queries_per_month: 1000
resources:
  cpu: {kind: time, usd_per_hour: 0.36, vcpus: 2, source: test}
  gpu: {kind: time, usd_per_hour: 7.2, source: test}
  api: {kind: tokens, input_per_1m: 1.0, output_per_1m: 2.0, source: test}
  storage: {kind: storage, ram_usd_per_gb_month: 2.0, disk_usd_per_gb_month: 0.1, source: test}
fleet:
  gpu: {count: 1, note: "one vLLM server, always on"}
"""


def _app():
    app = typer.Typer()
    app.command()(report)
    app.command("noop")(lambda: None)
    return app


def _book(tmp_path, text=BOOK):
    p = tmp_path / "book.yaml"
    p.write_text(text)
    return p


def _queries(led: Ledger, book, run_id: str, n: int = 4) -> None:
    """n queries between T0+10min and T0+100min: a batch embed on cpu, a generate on gpu, tokens, storage."""
    rows_embed = UsageRecord(stage="embed", resource="cpu", wall_seconds=0.4, items=n, cpu_seconds=0.6, call_id="e1")
    for i in range(n):
        rows = [stage_row(rows_embed, book, "e1"),
                stage_row(UsageRecord(stage="retrieve", resource="cpu", wall_seconds=0.01, cpu_seconds=0.002 * (i + 1)), book),
                stage_row(UsageRecord(stage="generate", resource="gpu", wall_seconds=0.5 + i / 10), book),
                stage_row(UsageRecord(stage="judge", resource="api", input_tokens=1000, output_tokens=50), book),
                storage_row(3 * 2**20, 10 * 2**20, book)]
        led.record_query(run_id, {"text": f"q{i}", "at": T0 + timedelta(minutes=10 + 30 * i), "useful": 1 + i % 2}, rows)


class TestProvisionedHours:
    def test_workers_on_one_host_hold_it_once_two_hosts_twice(self):
        lives = [{"resource": "cpu", "host": "a", "started_at": T0, "stopped_at": T0 + 2 * H},
                 {"resource": "cpu", "host": "a", "started_at": T0 + H, "stopped_at": T0 + 3 * H},  # a second worker
                 {"resource": "cpu", "host": "b", "started_at": T0, "stopped_at": T0 + H}]
        assert provisioned_hours(lives, None, None) == {"cpu": pytest.approx(4.0, abs=1e-12)}

    def test_two_replicas_on_one_host_hold_two_instances_their_workers_one_each(self):
        lives = [{"resource": "cpu", "host": "a", "replica": "r1", "started_at": T0, "stopped_at": T0 + 2 * H},
                 {"resource": "cpu", "host": "a", "replica": "r1", "started_at": T0 + H, "stopped_at": T0 + 2 * H},  # r1's worker
                 {"resource": "cpu", "host": "a", "replica": "r2", "started_at": T0, "stopped_at": T0 + H}]
        assert provisioned_hours(lives, None, None) == {"cpu": pytest.approx(3.0, abs=1e-12)}

    def test_the_bill_splits_by_replica_and_the_replicas_plus_storage_are_the_total(self, tmp_path):
        from ragcost.cost.bill import by_replica

        book = load_price_book(_book(tmp_path, BOOK.replace("fleet:\n  gpu: {count: 1, note: \"one vLLM server, always on\"}\n", "")))
        cpu = lambda sec: stage_row(UsageRecord(stage="embed", resource="cpu", wall_seconds=sec, cpu_seconds=sec), book)
        qrows, srows = [], []
        for i, (rep, sec) in enumerate([("r1", 36.0), ("r1", 36.0), ("r2", 72.0)]):
            qrows.append({"query_id": f"q{i}", "replica": rep, "at": T0 + timedelta(minutes=10 + i), "useful": 1})
            for r in (cpu(sec), storage_row(2**20, 2**20, book)):
                srows.append({**r, "query_id": f"q{i}"})
        lives = [{"resource": "cpu", "host": "a", "replica": "r1", "started_at": T0, "stopped_at": T0 + 2 * H},
                 {"resource": "cpu", "host": "a", "replica": "r2", "started_at": T0, "stopped_at": T0 + H}]
        bill = build_bill(qrows, srows, lives, book)
        per = {r["replica"]: r for r in by_replica(qrows, srows, lives, book, T0, T0 + 2 * H)}
        # 72 CPU-s on 2 vCPUs = 36 vCPU-s busy = 0.01 h a replica; 2 h and 1 h provisioned
        assert per["r1"]["resources"] == [{"resource": "cpu", "provisioned_hours": pytest.approx(2.0),
                                           "busy_hours": pytest.approx(0.01), "utilization": pytest.approx(0.005)}]
        assert per["r2"]["resources"][0]["provisioned_hours"] == pytest.approx(1.0)
        assert per["r2"]["resources"][0]["utilization"] == pytest.approx(0.01)
        assert per["r1"]["usd_fully_loaded"] == pytest.approx(2 * 0.36) and per["r2"]["usd_fully_loaded"] == pytest.approx(0.36)
        assert (per["r1"]["queries"], per["r2"]["queries"]) == (2, 1)
        storage = next(x.usd_fully_loaded for x in bill.resources if x.resource == "storage")
        assert sum(r["usd_fully_loaded"] for r in per.values()) + storage == pytest.approx(bill.usd_fully_loaded)
        line = next(x for x in bill.resources if x.resource == "cpu")
        assert line.provisioned_hours == pytest.approx(3.0) and line.utilization == pytest.approx(0.02 / 3.0)
        from ragcost.cli.report import replica_lines

        shown = replica_lines(list(per.values()))
        assert shown[0].startswith("replica r1: 2 queries; cpu provisioned 2 h, busy 0.01 h (0.5% utilized); fully loaded $0.72")
        assert "storage not included" in shown[0] and shown[1].startswith("replica r2: 1 queries; cpu provisioned 1 h")

    def test_a_window_clips_and_a_crash_ends_at_the_last_heartbeat(self):
        lives = [{"resource": "cpu", "host": "a", "started_at": T0, "heartbeat_at": T0 + 90 * timedelta(minutes=1),
                  "stopped_at": None}]
        assert provisioned_hours(lives, T0 + H, None)["cpu"] == pytest.approx(0.5, abs=1e-12)
        assert merged_hours([], None, None) == 0.0


class TestFullyLoadedReconciles:
    """Must hold: fully loaded = provisioned hours x $/h (+ storage) to 1e-9; utilization = busy / provisioned."""

    def test_a_recorded_lifetime_on_duckdb_and_postgres(self, any_store_url, tmp_path):
        bp = _book(tmp_path)
        book = load_price_book(bp)
        with Ledger(any_store_url) as led:
            run = led.start_run("query", "kb", book.version)
            a = led.start_lifetime("serve", "kb", "cpu", run, host="h1", at=T0)
            b = led.start_lifetime("serve", "kb", "cpu", run, host="h1", at=T0 + timedelta(minutes=5))  # worker 2
            led.heartbeat(a, at=T0 + H)
            _queries(led, book, run)
            led.stop_lifetime(b, at=T0 + 90 * timedelta(minutes=1))
            led.stop_lifetime(a, at=T0 + 2 * H)
            _, srows = led.read()
        res = CliRunner().invoke(_app(), ["report", "--ledger", any_store_url, "--pricing", str(bp), "--json"])
        assert res.exit_code == 0, res.output
        bill = json.loads(res.output)["bill"]
        by = {r["resource"]: r for r in bill["resources"]}
        # The world, written out: the window is the lifetime, 2 h; the host holds cpu 2 h; the fleet GPU 1 x 2 h.
        assert bill["window_hours"] == pytest.approx(2.0, abs=1e-12) and bill["basis"] == "provisioned"
        assert by["cpu"]["provisioned_hours"] == pytest.approx(2.0, abs=1e-12)
        assert by["gpu"]["provisioned_hours"] == pytest.approx(2.0, abs=1e-12)
        assert math.isclose(by["cpu"]["usd_fully_loaded"], 2.0 * 0.36, abs_tol=1e-9)
        assert math.isclose(by["gpu"]["usd_fully_loaded"], 2.0 * 7.2, abs_tol=1e-9)
        # Busy, from the rows' own CPU-seconds (each call once) / vCPUs, and GPU wall seconds.
        calls = {r["call_id"]: r for r in srows if r["resource"] == "cpu"}
        cpu_busy_h = sum(r["cpu_seconds"] for r in calls.values()) / 2 / 3600
        gpu_busy_h = sum(r["wall_seconds"] for r in srows if r["resource"] == "gpu") / 3600
        assert math.isclose(by["cpu"]["busy_hours"], cpu_busy_h, rel_tol=1e-9)
        assert math.isclose(by["cpu"]["utilization"], cpu_busy_h / 2.0, rel_tol=1e-9)
        assert math.isclose(by["gpu"]["utilization"], gpu_busy_h / 2.0, rel_tol=1e-9)
        # Storage: the index's GiB-months for the window's 2 hours; tokens have no idle time.
        monthly = 3 / 1024 * 2.0 + 10 / 1024 * 0.1
        assert math.isclose(by["storage"]["usd_fully_loaded"], monthly * 2 / 730, abs_tol=1e-9)
        tokens = 4 * (1000 * 1.0 + 50 * 2.0) / 1e6
        assert math.isclose(by["api"]["usd_fully_loaded"], tokens, abs_tol=1e-9)
        total = 2 * 0.36 + 2 * 7.2 + monthly * 2 / 730 + tokens
        assert math.isclose(bill["usd_fully_loaded"], total, abs_tol=1e-9)
        assert math.isclose(bill["usd_per_query_fully_loaded"], total / 4, abs_tol=1e-9)
        assert math.isclose(bill["usd_per_useful_fully_loaded"], total / 6, abs_tol=1e-9)  # useful 1+2+1+2
        assert math.isclose(bill["usd_marginal"], sum(r["cost_usd"] for r in srows), abs_tol=1e-12)

    def test_the_terminal_and_csv_show_both_figures(self, tmp_path):
        bp = _book(tmp_path)
        url = f"duckdb:///{tmp_path}/l.duckdb"
        book = load_price_book(bp)
        with Ledger(url) as led:
            run = led.start_run("query", "kb", book.version)
            lid = led.start_lifetime("batch", "kb", "cpu", run, at=T0)
            _queries(led, book, run)
            led.stop_lifetime(lid, at=T0 + 2 * H)
        res = CliRunner().invoke(_app(), ["report", "--ledger", url, "--pricing", str(bp)])
        assert res.exit_code == 0, res.output
        assert "the bill" in res.output and "fully loaded" in res.output and "lifetimes" in res.output
        csv = CliRunner().invoke(_app(), ["report", "--ledger", url, "--pricing", str(bp), "--csv"]).output.splitlines()
        header = csv[0].split(",")
        rows = [dict(zip(header, line.split(","))) for line in csv[1:]]
        cpu = next(r for r in rows if r["stage"] == "(resource)" and r["resource"] == "cpu")
        assert float(cpu["provisioned_hours"]) == pytest.approx(2.0) and float(cpu["usd_fully_loaded"]) == pytest.approx(0.72)
        assert rows[-1]["stage"] == "(total)" and float(rows[-1]["usd_fully_loaded"]) > float(rows[-1]["usd_marginal"])


class TestLifetimesABillCannotUse:
    """issue 39, item 6: a lifetime dated in the future stretched the window (one row in 2099: 631,800 h, storage billed
    for 72 years) with no note, and one that ends before it starts was dropped without being named."""

    def test_each_is_left_out_and_named_and_the_window_is_the_real_one(self, tmp_path):
        bp = _book(tmp_path)
        url = f"duckdb:///{tmp_path}/l.duckdb"
        book = load_price_book(bp)
        with Ledger(url) as led:
            run = led.start_run("query", "kb", book.version)
            lid = led.start_lifetime("batch", "kb", "cpu", run, host="h1", at=T0)
            _queries(led, book, run)
            led.stop_lifetime(lid, at=T0 + 2 * H)
            future = led.start_lifetime("serve", "kb", "cpu", run, host="h2", at=datetime(2099, 1, 1))
            led.stop_lifetime(future, at=datetime(2099, 1, 2))
            backwards = led.start_lifetime("serve", "kb", "cpu", run, host="h3", at=T0 + H)
            led.stop_lifetime(backwards, at=T0)
        res = CliRunner().invoke(_app(), ["report", "--ledger", url, "--pricing", str(bp), "--json"])
        assert res.exit_code == 0, res.output
        bill = json.loads(res.output)["bill"]
        assert bill["window_hours"] == pytest.approx(2.0, abs=1e-12)
        cpu = next(r for r in bill["resources"] if r["resource"] == "cpu")
        assert cpu["provisioned_hours"] == pytest.approx(2.0, abs=1e-12)
        notes = " ".join(bill["notes"])
        assert f"lifetime {future} (cpu on h2) is dated in the future (2099-01-01" in notes
        assert f"lifetime {backwards} (cpu on h3) ends (" in notes and "before it starts" in notes


class TestWithoutProvisionedData:
    def test_falls_back_to_declared_traffic_and_says_so(self, book):
        rows = [{"stage": "embed", "resource": "cpu", "cost_usd": 1e-5, "query_id": "q", "items": 1}]
        bill = build_bill([{"query_id": "q", "at": T0, "useful": 1}], rows, [], book)
        [cpu] = bill.resources
        # cpu is $0.36/h: at 1,000 queries a month, one instance always on = 0.36 x 730 / 1000 per query.
        assert cpu.basis.startswith("declared traffic") and cpu.instances == 1
        assert cpu.usd_fully_loaded == pytest.approx(0.36 * 730 / 1000, rel=1e-12)
        assert bill.basis == "declared traffic" and any("no provisioned data" in n for n in bill.notes)

    def test_a_ledger_without_the_lifetime_table_is_read_and_named(self, tmp_path):
        import sqlalchemy as sa

        url = f"duckdb:///{tmp_path}/old.duckdb"
        bp = _book(tmp_path, BOOK.split("fleet:")[0])
        book = load_price_book(bp)
        with Ledger(url) as led:
            run = led.start_run("query", "kb", book.version)
            _queries(led, book, run, n=2)
            with led.engine.begin() as conn:
                conn.execute(sa.text("DROP TABLE rc_ledger_lifetimes"))  # as an older ragcost wrote it
        res = CliRunner().invoke(_app(), ["report", "--ledger", url, "--pricing", str(bp), "--json"])
        assert res.exit_code == 0, res.output
        bill = json.loads(res.output)["bill"]
        assert any("no lifetime table" in n for n in bill["notes"]) and bill["basis"] == "declared traffic"
        assert not sa.inspect(sa.create_engine(url)).has_table("rc_ledger_lifetimes")  # report stays read-only

    def test_a_window_with_no_data_says_so(self, tmp_path):
        bp = _book(tmp_path)
        url = f"duckdb:///{tmp_path}/l.duckdb"
        with Ledger(url) as led:
            _queries(led, load_price_book(bp), led.start_run("query", "kb", "bill.1"), n=1)
        res = CliRunner().invoke(_app(), ["report", "--ledger", url, "--pricing", str(bp), "--since", "2999-01-01"])
        assert res.exit_code == 0, res.output
        assert "no queries in the ledger for this selection" in res.output and "Traceback" not in res.output


class TestFleetIsChecked:
    def test_an_unknown_resource_is_one_line_naming_it(self, tmp_path):
        with pytest.raises(ConfigError, match=r"book.yaml:\d+:\d+: fleet.gpu-a100: unknown resource 'gpu-a100'.*known: cpu, gpu") as e:
            load_price_book(_book(tmp_path, BOOK.replace("  gpu: {count", "  gpu-a100: {count")))
        assert "\n" not in str(e.value)

    def test_a_negative_count_is_one_line_naming_the_field(self, tmp_path):
        with pytest.raises(ConfigError, match=r"fleet.gpu.count") as e:
            load_price_book(_book(tmp_path, BOOK.replace("count: 1", "count: -2")))
        assert "\n" not in str(e.value).strip()

    def test_a_token_resource_is_not_capacity(self, tmp_path):
        with pytest.raises(ConfigError, match="tokens-priced; always-on capacity"):
            load_price_book(_book(tmp_path, BOOK.replace("  gpu: {count", "  api: {count")))

    def test_a_lifetime_needs_a_known_kind_and_a_worker(self, tmp_path):
        from ragcost.errors import StoreError

        with Ledger(f"duckdb:///{tmp_path}/l.duckdb") as led:
            with pytest.raises(StoreError, match="workers=-1"):
                led.start_lifetime("serve", "kb", "cpu", workers=-1)
            with pytest.raises(StoreError, match="'daemon' is not one of serve, batch"):
                led.start_lifetime("daemon", "kb", "cpu")
