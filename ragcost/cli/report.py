"""``ragcost report``: per stage latency, calls, tokens and dollars from the ledger, with the totals."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer

from ragcost.cost.ledger import DEFAULT_URL
from ragcost.cost.window import parse_since
from ragcost.errors import ConfigError, StoreError
from ragcost.urls import url_problem, without_secrets


def report(
    pipeline_file: Optional[Path] = typer.Argument(None, help="pipeline YAML: read the ledger in its store and report its runs"),
    ledger: Optional[str] = typer.Option(None, "--ledger", help=f"SQLAlchemy URL of the ledger (default: the pipeline's store, else {DEFAULT_URL})."),
    since: Optional[str] = typer.Option(None, "--since", help="Only queries at/after this: ISO date/time (UTC) or 30m, 24h, 7d, 2w."),
    pipeline: Optional[str] = typer.Option(None, "--pipeline", help="Only this pipeline's runs (its name)."),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
    csv_: bool = typer.Option(False, "--csv", help="Print CSV: one row per stage and a (total) row."),
    pricing: Optional[Path] = typer.Option(None, "--pricing", help="Price book whose version and age to show (default: the pipeline's, else pricing/default.yaml)."),
    tenant: Optional[str] = typer.Option(None, "--tenant", help="Only this tenant's queries (the API key's tenant under `ragcost serve`)."),
    replica: Optional[str] = typer.Option(None, "--replica", help="Only this serve replica's queries and provisioned hours (serve.replica)."),
) -> None:
    """Per stage p50/p95/p99, calls, tokens and $ per query; $ per 1k queries, per success, per useful document."""
    from ragcost.cost.report import aggregate, to_csv, to_json, to_rich_table

    if json_ and csv_:
        raise ConfigError("--json and --csv are exclusive; pick one")
    for flag, value in (("--pipeline", pipeline), ("--tenant", tenant), ("--replica", replica)):
        if value is not None and not value.strip():
            raise ConfigError(f"{flag} is empty; give a name (ragcost report without {flag} lists every one's queries)")
    book_path = pricing
    if pipeline_file is not None:
        from ragcost.runtime.pipeline import Pipeline

        pipe = Pipeline.load(pipeline_file)
        ledger = ledger or pipe.config.store_url
        pipeline = pipeline or pipe.config.name
        book_path = book_path or pipe.price_book_path
    ledger = ledger or DEFAULT_URL
    start = parse_since(since)
    _require_ledger(ledger)
    qrows, srows, lives, has_lives = _read(ledger, start, pipeline, tenant, replica)
    rep = aggregate(qrows, srows, since=start, pipeline=pipeline)
    cache = cache_value(ledger, qrows, srows, book_path)
    book = price_book_summary(book_path, ledger, pipeline)
    rep.bill = bill_of(book_path, qrows, srows, lives, has_lives, start, tenant).to_dict()
    if json_:
        import json

        from ragcost.cli.text import dumps

        # Re-dumped so NaN/inf (a zero-query ratio, an infinite price) come out as null: valid JSON.
        typer.echo(dumps({**json.loads(to_json(rep)), "cache": cache, "price_book": book}))
    elif csv_:
        typer.echo(to_csv(rep), nl=False)
    else:
        from rich.console import Console

        from ragcost.cost.report import bill_table

        if not rep.totals.queries:
            typer.echo("no queries in the ledger for this selection")
        else:
            Console(soft_wrap=True).print(to_rich_table(rep))
        if rep.bill["resources"]:
            Console(soft_wrap=True).print(bill_table(rep.bill))
        else:
            for note in rep.bill["notes"]:
                typer.echo(f"bill: {note}")
        for line in replica_lines(rep.bill["replicas"]):
            typer.echo(line)
        if cache is not None:
            for line in cache_lines(cache):
                typer.echo(line)
        typer.echo(_book_line(book))
        for warning in book["warnings"]:
            typer.echo(warning, err=True)
    # --json carries the warnings in price_book.warnings; --csv stays rows only (use --json for the book).


def price_book_summary(path: Optional[Path], ledger: str, pipeline: Optional[str]) -> dict:
    """The book's version, dates and stale prices, the versions the ledger's runs were priced with, and warnings."""
    from ragcost.cli.text import terminal_safe
    from ragcost.cost.ledger import Ledger
    from ragcost.cost.pricebook import book_age, default_price_book_path, load_price_book, stale_warning

    book = load_price_book(path or default_price_book_path())
    age = book_age(book)
    led = Ledger(ledger, read_only=True)
    try:
        runs = [r for r in led.list_runs() if pipeline is None or r["pipeline"] == pipeline]
    finally:
        led.close()
    versions = sorted({str(r["price_book_version"]) for r in runs if r["price_book_version"] is not None})
    warnings = [w for w in [stale_warning(age)] if w]
    if versions and versions != [book.version]:
        warnings.append(f"warning: the ledger's runs were priced with price book version(s) "
                        f"{', '.join(terminal_safe(v, one_line=True) for v in versions)}; {age['name']} is version {book.version}")
    return {**age, "ledger_versions": versions, "warnings": warnings}


def cache_value(url: str, qrows: list[dict], srows: list[dict], book_path: Optional[Path]) -> Optional[dict]:
    """The cache's value over these rows (:func:`ragcost.cache.savings.cache_summary`): a hit's origin outside them
    is read from the ledger by id, and false hits are priced at the book's ``wrong_answer_usd``."""
    from ragcost.cache.savings import cache_summary
    from ragcost.cost.ledger import Ledger
    from ragcost.cost.pricebook import default_price_book_path, load_price_book

    def origin_rows(ids: list[str]) -> list[dict]:
        with Ledger(url, read_only=True) as led:
            return led.stage_rows(ids)

    book = load_price_book(book_path or default_price_book_path())
    return cache_summary(qrows, srows, origin_rows, book.wrong_answer_usd)


def bill_of(path: Optional[Path], qrows: list[dict], srows: list[dict], lives: list[dict], has_lives: bool,
            start: Optional[datetime], tenant: Optional[str]):
    """Marginal and fully loaded dollars of the selection (:mod:`ragcost.cost.bill`)."""
    from ragcost.cost.bill import build_bill, by_replica, window
    from ragcost.cost.ledger import utcnow
    from ragcost.cost.pricebook import default_price_book_path, load_price_book

    book = load_price_book(path or default_price_book_path())
    lo = start.astimezone(timezone.utc).replace(tzinfo=None) if start is not None else None
    hi = utcnow() if lo is not None else None
    bill = build_bill(qrows, srows, lives, book, since=lo, until=hi, lifetimes_table=has_lives)
    bill.replicas = by_replica(qrows, srows, lives, book, *window(qrows, lives, lo, hi))
    if tenant is not None:
        bill.notes.append(f"--tenant {tenant}: provisioned hours are the whole server's, shared by every tenant; "
                          "this tenant's fully loaded figure charges it all of them")
    return bill


def _book_line(book: dict) -> str:
    oldest = book["oldest_price"]
    return (f"price book {book['name']} version {book['version']} (as of {book['as_of']}); oldest price "
            f"{oldest['resource']} as of {oldest['as_of']}, {oldest['age_days']} days old (max_age_days {book['max_age_days']})")


def _read(url: str, start: Optional[datetime], pipeline: Optional[str],
          tenant: Optional[str], replica: Optional[str] = None) -> tuple[list[dict], list[dict], list[dict], bool]:
    """The ledger's query and stage rows for this selection (one tenant's only, with ``tenant``; one
    replica's, with ``replica``), the lifetimes of the processes of the selected pipeline(s) (of that
    replica), and whether the ledger has a lifetime table."""
    from ragcost.cost.ledger import Ledger

    with Ledger(url, read_only=True) as led:
        qrows, srows = led.read(start, pipeline)
        lives, has_lives = led.read_lifetimes(pipeline), led.has_lifetimes_table()
    if replica is not None:
        lives = [r for r in lives if r.get("replica") == replica]
        qrows = [q for q in qrows if q.get("replica") == replica]
    if tenant is None and replica is None:
        return qrows, srows, lives, has_lives
    if tenant is not None:
        qrows = [q for q in qrows if q.get("tenant") == tenant]
    ids = {q["query_id"] for q in qrows}
    return qrows, [r for r in srows if r["query_id"] in ids], lives, has_lives


def _usd(x: Optional[float]) -> str:
    from ragcost.cost.fmt import money

    return money(x, missing="unknown")


def replica_lines(replicas: list[dict]) -> list[str]:
    """Under the bill, one line per serve replica (its own queries and provisioned hours; storage is the bill's)."""
    from ragcost.cost.report import _hours

    lines = []
    for r in replicas:
        held = "; ".join(f"{x['resource']} provisioned {_hours(x['provisioned_hours'])} h, busy {_hours(x['busy_hours'])} h"
                         + (f" ({x['utilization']:.1%} utilized)" if x["utilization"] is not None else "")
                         for x in r["resources"]) or "no time resource"
        lines.append(f"replica {r['replica']}: {r['queries']} queries; {held}; fully loaded {_usd(r['usd_fully_loaded'])} "
                     f"({_usd(r['usd_per_query_fully_loaded'])} a query, storage not included)")
    return lines


def cache_lines(c: dict) -> list[str]:
    """The cache block under the stage table: hits by tier, the false-hit estimate and its price, avoided, own cost, net."""
    fh, t = c["false_hit"], c["hits_by_tier"]
    unverified = t["semantic_unverified"]
    if fh["sampled_checks"]:
        lo, hi = fh["interval_95"]
        false_hit = (f"{fh['wrong']}/{fh['sampled_checks']} sampled checks of unverified hits wrong "
                     f"({fh['rate_unverified']:.2%}, 95% interval {lo:.2%}-{hi:.2%}); served false-hit rate "
                     f"{fh['served_rate']:.2%} ({fh['served_interval_95'][0]:.2%}-{fh['served_interval_95'][1]:.2%})")
    elif not unverified:
        false_hit = "every semantic hit was verified first (the bound trusted none unverified), so none was served unchecked"
    else:
        false_hit = f"{unverified} semantic hits served unverified and no sampled check of them (verify_share 0?): no estimate"
    if not unverified:
        priced = "false-hit cost $0 (no hit served unverified)"
    elif fh["expected_usd"] is not None:
        lo, hi = fh["expected_usd_interval_95"]
        n_lo, n_hi = fh["expected_interval_95"]
        priced = (f"false-hit cost {_usd(fh['expected_usd'])} (95% interval {_usd(lo)}-{_usd(hi)}): {fh['expected']:.3g} "
                  f"expected false hits ({n_lo:.3g}-{n_hi:.3g}) x {_usd(fh['wrong_answer_usd'])} a wrong answer")
    elif fh["wrong_answer_usd"] is None:
        priced = "false-hit cost: not priced (set wrong_answer_usd in the price book)"
    else:
        priced = "false-hit cost unknown (no sampled check of the unverified hits)"
    unknown = f", {c['avoided_unknown']} hits' avoided unknown (origin not in the ledger)" if c["avoided_unknown"] else ""
    net = f"net {_usd(c['net_usd'])}"
    if c["net_interval_95"] is not None and c["net_interval_95"][0] != c["net_interval_95"][1]:
        net += f" ({_usd(c['net_interval_95'][0])} to {_usd(c['net_interval_95'][1])})"
    own = ", ".join(f"{k} {_usd(v)}" for k, v in sorted(c["own_cost_by_stage"].items())) or "none"
    return [
        f"cache: {c['lookups']} lookups, hit rate {c['hit_rate']:.1%}: {t['exact']} exact, {t['semantic_verified']} "
        f"semantic verified, {unverified} semantic unverified; {c['misses']} misses",
        f"cache false hits: {false_hit}; {c['verifications']} verifications, {c['verifications_wrong']} wrong",
        f"cache dollars: avoided {_usd(c['avoided_usd'])} ({_usd(c['avoided_per_hit_usd'])} a hit, the origins' "
        f"{', '.join(sorted(c['avoided_by_stage'])) or 'skipped stages'}){unknown}; own cost {_usd(c['own_cost_usd'])} ({own}); {priced}",
        f"cache net: {net}{'' if fh['expected_usd'] is not None else ' (false hits not counted)'}: {c['verdict']}",
    ]


_LEDGER_TABLES = ("rc_ledger_runs", "rc_ledger_queries", "rc_ledger_stage_calls")


def _require_ledger(url: str) -> None:
    """``report`` is read-only: refuse a missing embedded database file or one without ledger tables.

    Opening either through the Ledger would create it (the file, or the tables), so check first.
    """
    from ragcost.cli.paths import embedded_path

    problem = url_problem(url)
    if problem:
        raise StoreError(f"ledger {problem}; fix --ledger or the pipeline's store")
    path = embedded_path(url)
    if path is None and url.split(":", 1)[0] in ("duckdb", "sqlite"):
        return  # in memory: nothing on disk to create
    if path is not None and not path.is_file():
        raise StoreError(f"no ledger at {path}; run `ragcost query` or `ragcost eval` first, or pass --ledger URL")
    import sqlalchemy as sa

    from ragcost.store.readonly import read_only_engine
    from ragcost.store.sql_errors import held_message, is_locked

    try:
        engine = read_only_engine(url)  # a report only reads: DuckDB's read-only mode, so a read-only disk works
        shown = engine.url.render_as_string(hide_password=True)
    except Exception as e:
        if is_locked(e):
            raise StoreError(held_message(url, e, "ledger")) from None
        raise StoreError(f"--ledger: cannot open ({type(e).__name__}); check the SQLAlchemy URL, e.g. duckdb:///.ragcost/ledger.duckdb") from None
    try:
        with engine.connect() as conn:
            for table in _LEDGER_TABLES:
                try:
                    conn.execute(sa.select(sa.text("1")).select_from(sa.table(table)).limit(0))
                except Exception:
                    raise StoreError(f"no ledger in {shown} (table {table} is missing); run `ragcost query` or `ragcost eval` against it first") from None
    except StoreError:
        raise
    except Exception as e:
        raise StoreError(f"ledger {shown}: cannot open ({type(e).__name__}: {without_secrets((str(e).splitlines() or [''])[0][:200], url)}); check the URL and that the server is up") from None
    finally:
        engine.dispose()
