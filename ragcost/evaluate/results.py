"""Eval results in the ledger (a run of kind 'eval' plus rows in ``rc_eval_results``), CSV/Parquet export, and compare.

``rc_eval_results``: one row per (run_id, config). Fixed columns for what every run measures
(nDCG@10, MRR@10, recall/precision/ANN recall at the first k, latency, QPS, bytes, dollars,
pareto, recommended) and ``metrics``, a JSON object with every metric the spec asked for.
Migrations are additive, as the ledger's: missing tables and columns are created, nothing dropped.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Optional

import sqlalchemy as sa

from ragcost.errors import ConfigError, StoreError

metadata = sa.MetaData()
eval_results = sa.Table(
    "rc_eval_results", metadata,
    sa.Column("run_id", sa.String(32), primary_key=True),
    sa.Column("config", sa.String(300), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("spec", sa.String(200)),
    sa.Column("dataset", sa.String(200)),
    sa.Column("pipeline", sa.String(200)),
    sa.Column("index_file", sa.String(500)),
    sa.Column("backend", sa.String(32)),
    sa.Column("kind", sa.String(32)),
    sa.Column("dim", sa.Integer),
    sa.Column("precision", sa.String(16)),
    sa.Column("build", sa.Text),
    sa.Column("search", sa.Text),
    sa.Column("rerank", sa.Text),
    sa.Column("k", sa.Integer),
    sa.Column("quality_metric", sa.String(32)),
    sa.Column("quality", sa.Double),
    sa.Column("ndcg_at_10", sa.Double),
    sa.Column("mrr_at_10", sa.Double),
    sa.Column("recall_at_k", sa.Double),
    sa.Column("precision_at_k", sa.Double),
    sa.Column("ann_recall_at_k", sa.Double),
    sa.Column("metrics", sa.Text),
    sa.Column("p50_ms", sa.Double),
    sa.Column("p95_ms", sa.Double),
    sa.Column("p99_ms", sa.Double),
    sa.Column("qps_single", sa.Double),
    sa.Column("qps_batch", sa.Double),
    sa.Column("build_seconds", sa.Double),
    sa.Column("bytes_per_vector", sa.Double),
    sa.Column("index_bytes", sa.BigInteger),
    sa.Column("queries", sa.Integer),
    sa.Column("useful", sa.Integer),
    sa.Column("total_usd", sa.Double),
    sa.Column("usd_per_1k_queries", sa.Double),
    sa.Column("usd_per_useful", sa.Double),  # NULL: no useful document was retrieved
    sa.Column("pareto", sa.Boolean),
    sa.Column("recommended", sa.Boolean),
    sa.Column("stages", sa.Text),  # JSON: per stage usd, useful, usd_per_useful (storage last)
    sa.Column("useful_threshold", sa.Double),  # calibrated score threshold; NULL: the precision target was not reached
    sa.Column("calibration", sa.Text),  # JSON: evaluate.calibrate.Calibration
    sa.Column("quality_lo", sa.Double),  # the quality's 95% bootstrap interval over queries (NULL: too few queries)
    sa.Column("quality_hi", sa.Double),
    sa.Column("usd_per_useful_lo", sa.Double),
    sa.Column("usd_per_useful_hi", sa.Double),
    sa.Column("timing_noise", sa.Double),  # relative spread of the repeated timing rounds
    sa.Column("ci", sa.Text),  # JSON: figure -> [lo, hi]
    sa.Column("per_query", sa.Text),  # JSON: {ids, quality, useful, usd}: what a paired --compare resamples
)

COMPARED = ("quality", "recall_at_k", "ann_recall_at_k", "p95_ms", "usd_per_useful", "bytes_per_vector")


def _migrate(engine: sa.Engine) -> None:
    metadata.create_all(engine, checkfirst=True)
    with engine.begin() as conn:
        have = set(conn.execute(sa.select(sa.text("*")).select_from(sa.table(eval_results.name)).limit(0)).keys())
        for col in eval_results.columns:
            if col.name not in have:
                conn.execute(sa.text(f'ALTER TABLE {eval_results.name} ADD COLUMN "{col.name}" {col.type.compile(dialect=engine.dialect)}'))


def flat_row(run: Any, r: Any) -> dict[str, Any]:
    """One configuration as a flat dict: the table's columns (metrics also spread out as their own keys)."""
    k = run.k[0]
    row = {
        "run_id": run.run_id, "config": r.name, "status": r.status, "reason": r.reason or None, "spec": run.name,
        "dataset": run.dataset, "pipeline": run.pipeline, "index_file": r.index_file, "backend": r.backend, "kind": r.kind,
        "dim": r.dim, "precision": r.precision, "build": json.dumps(r.build, sort_keys=True),
        "search": json.dumps(r.search, sort_keys=True), "rerank": json.dumps(r.rerank, sort_keys=True) if r.rerank else None,
        "k": k, "quality_metric": run.quality, "quality": r.metrics.get(run.quality),
        "ndcg_at_10": r.metrics.get("ndcg@10"), "mrr_at_10": r.metrics.get("mrr@10"),
        "recall_at_k": r.metrics.get(f"recall@{k}"), "precision_at_k": r.metrics.get(f"precision@{k}"),
        "ann_recall_at_k": r.metrics.get(f"ann_recall@{k}"), "metrics": json.dumps(r.metrics, sort_keys=True),
        "stages": json.dumps(r.stages) if r.stages else None,
        "useful_threshold": (r.calibration or {}).get("threshold"),
        "calibration": json.dumps(r.calibration, sort_keys=True) if r.calibration else None,
        "quality_lo": _ci(r, run.quality, 0), "quality_hi": _ci(r, run.quality, 1),
        "usd_per_useful_lo": _ci(r, "usd_per_useful", 0), "usd_per_useful_hi": _ci(r, "usd_per_useful", 1),
        "timing_noise": r.timing_noise if r.status == "ok" else None,
        "ci": json.dumps(r.ci, sort_keys=True) if r.ci else None,
        "per_query": _per_query_json(run, r),
    }
    for name in ("p50_ms", "p95_ms", "p99_ms", "qps_single", "qps_batch", "build_seconds", "bytes_per_vector",
                 "index_bytes", "queries", "useful", "total_usd", "usd_per_1k_queries", "usd_per_useful", "pareto", "recommended"):
        row[name] = getattr(r, name)
    if r.status != "ok":
        for name in ("p50_ms", "p95_ms", "p99_ms", "qps_single", "qps_batch", "build_seconds", "bytes_per_vector",
                     "index_bytes", "queries", "useful", "total_usd", "usd_per_1k_queries"):
            row[name] = None
    return row


def _ci(r: Any, name: str, end: int) -> Optional[float]:
    ci = getattr(r, "ci", None) or {}
    return ci[name][end] if name in ci else None


def _per_query_json(run: Any, r: Any) -> Optional[str]:
    pq = getattr(r, "per_query", None) or {}
    if r.status != "ok" or run.quality not in pq:
        return None
    return json.dumps({"ids": list(run.query_ids), "quality": [round(float(x), 6) for x in pq[run.quality]],
                       "useful": [int(x) for x in pq["useful"]], "usd": [float(x) for x in pq["usd"]]})


def export_rows(run: Any) -> list[dict[str, Any]]:
    """Rows for CSV/Parquet: the table's columns with each metric (and its interval, _lo/_hi) as its own columns."""
    out = []
    for r in run.results:
        row = flat_row(run, r)
        row.pop("per_query", None)
        for m in [*run.metric_names, *(f"ann_recall@{k}" for k in run.k)]:
            row[m] = r.metrics.get(m)
            if not m.startswith("ann_recall"):
                row[f"{m}_lo"], row[f"{m}_hi"] = _ci(r, m, 0), _ci(r, m, 1)
        row["usd_per_1k_queries_lo"], row["usd_per_1k_queries_hi"] = _ci(r, "usd_per_1k_queries", 0), _ci(r, "usd_per_1k_queries", 1)
        out.append(row)
    return out


def write_csv(run: Any, path: Path) -> None:
    rows = export_rows(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["config"])
        w.writeheader()
        w.writerows(rows)


def write_parquet(run: Any, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = export_rows(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def record(run: Any, ledger_url: str) -> str:
    """Write the run to the ledger (runs row of kind 'eval' + rc_eval_results rows); returns the run id."""
    from ragcost.cost.ledger import Ledger

    with Ledger(ledger_url) as ledger:
        _migrate(ledger.engine)
        cfg = {"spec": run.spec_path, "dataset": run.dataset, "queries": run.queries, "documents": run.documents,
               "chunks": run.chunks, "quality": run.quality, "within_pct": run.within_pct, "k": run.k}
        run.run_id = ledger.start_run("eval", run.pipeline, run.price_book_version, cfg)
        rows = [flat_row(run, r) for r in run.results]
        with ledger.engine.begin() as conn:
            if rows:
                conn.execute(sa.insert(eval_results), rows)
        ledger.finish_run(run.run_id)
    return run.run_id


RECORDED = Path(".ragcost") / "eval-runs.jsonl"  # where this folder's `ragcost eval` runs were recorded (for --compare)


def note_recorded(run_id: str, ledger_url: str, folder: Path = Path(".")) -> None:
    """Append where run ``run_id`` was recorded to this folder's index, so ``eval --compare`` finds it without
    --ledger. A URL holding a password is kept only as shown (password hidden): --compare then asks for it."""
    from datetime import datetime, timezone

    from ragcost.urls import shown_url

    shown = shown_url(ledger_url)
    entry = {"run_id": run_id, "ledger": ledger_url if shown == ledger_url else None, "shown": shown,
             "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    path = folder / RECORDED
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
    except OSError:  # a read-only folder: the run is recorded all the same; --compare then needs --ledger
        pass


def recorded_in(ref: str, folder: Path = Path(".")) -> Optional[tuple[str, str]]:
    """(ledger URL, run id) of ``ref`` ('last', 'previous', an id or id prefix) as this folder's eval recorded it;
    None when the folder's index does not know it."""
    path = folder / RECORDED
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    entries = []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:  # a line cut by a crash: the others still count
            continue
        if isinstance(e, dict) and isinstance(e.get("run_id"), str):
            entries.append(e)
    if ref in ("last", "latest", "previous", "prev"):
        at = 1 if ref in ("last", "latest") else 2
        if len(entries) < at:
            return None
        e = entries[-at]
    else:
        match = {e["run_id"]: e for e in entries if e["run_id"].startswith(ref)}
        if len(match) != 1:
            return None
        e = next(iter(match.values()))
    if not e.get("ledger"):
        raise ConfigError(f"--compare: eval run {e['run_id'][:8]} was recorded in {e.get('shown')}, whose password "
                          "is not kept; pass --ledger URL with it")
    return e["ledger"], e["run_id"]


def _resolve_run(conn: sa.Connection, ref: str) -> str:
    from ragcost.cost.ledger import runs

    q = sa.select(runs.c.run_id).where(runs.c.kind == "eval").order_by(runs.c.started_at.desc())
    ids = list(conn.execute(q).scalars())
    if ref in ("last", "latest") and ids:
        return ids[0]
    if ref in ("previous", "prev") and len(ids) > 1:
        return ids[1]
    if ref in ("last", "latest", "previous", "prev"):  # named, but the ledger holds too few runs for it
        need, recent = (1 if ref in ("last", "latest") else 2), ", ".join(i[:8] for i in ids[:5])
        raise ConfigError(f"--compare: {ref!r} needs {need} recorded eval run{'s' if need > 1 else ''} in the ledger, "
                          f"which has {len(ids)}{f' ({recent})' if recent else ''}; run `ragcost eval SPEC` "
                          f"{'again ' if ids else ''}(without --no-ledger), or pass --ledger URL of the ledger that holds them")
    match = [i for i in ids if i.startswith(ref)]
    if len(match) == 1:
        return match[0]
    if not match:
        recent = ", ".join(i[:8] for i in ids[:5]) or "none yet"
        also = "; 'last' and 'previous' work too" if len(ids) > 1 else ""
        raise ConfigError(f"--compare: no eval run {ref!r} in the ledger (recent: {recent}{also})")
    raise ConfigError(f"--compare: run id prefix {ref!r} matches {len(match)} runs; give more characters")


def read_run(ledger_url: str, ref: str) -> tuple[str, list[dict[str, Any]]]:
    """A recorded eval run's id and its rows (by id, unique id prefix, 'last' or 'previous')."""
    from ragcost.cost.ledger import Ledger

    with Ledger(ledger_url) as ledger:
        _migrate(ledger.engine)
        with ledger.engine.connect() as conn:
            run_id = _resolve_run(conn, ref)
            rows = [dict(r._mapping) for r in conn.execute(sa.select(eval_results).where(eval_results.c.run_id == run_id))]
    if not rows:
        raise StoreError(f"eval run {run_id} has no rows in rc_eval_results (was it interrupted?)")
    return run_id, rows


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per config (matched by name): B - A for the compared measures, and what appeared or went."""
    by_a, by_b = {r["config"]: r for r in a}, {r["config"]: r for r in b}
    out = []
    for name in [*by_a, *(n for n in by_b if n not in by_a)]:
        ra, rb = by_a.get(name), by_b.get(name)
        change = "removed" if rb is None else "added" if ra is None else (
            "status" if ra["status"] != rb["status"] else "")
        row: dict[str, Any] = {"config": name, "change": change}
        for m in COMPARED:
            va = ra.get(m) if ra else None
            vb = rb.get(m) if rb else None
            row[m] = (va, vb, None if va is None or vb is None else vb - va)
        for m in ("pareto", "recommended"):
            row[m] = (ra.get(m) if ra else None, rb.get(m) if rb else None)
        out.append(row)
    # measured configurations first (best quality of B first), then what was skipped or failed
    return sorted(out, key=lambda r: (r["quality"][1] is None, -(r["quality"][1] or r["quality"][0] or 0.0)))


def split_ref(ref: str) -> tuple[str, Optional[str]]:
    """``RUN`` or ``RUN:CONFIG`` (a run id, id prefix, 'last' or 'previous', then a configuration of it)."""
    run, sep, config = ref.partition(":")
    return run, (config.strip() if sep and config.strip() else None)


def find_config(rows: list[dict[str, Any]], config: str, run_id: str) -> dict[str, Any]:
    """The row named ``config`` (exactly, or its name up to the first space, e.g. 'dense-flat' for 'dense-flat d384 f32')."""
    exact = [r for r in rows if r["config"] == config]
    match = exact or [r for r in rows if r["config"].split(" ")[0] == config] or [r for r in rows if r["config"].startswith(config)]
    if len(match) == 1:
        return match[0]
    names = ", ".join(repr(r["config"]) for r in rows[:8])
    if not match:
        raise ConfigError(f"--compare: eval run {run_id[:8]} has no configuration {config!r} (it has: {names})")
    raise ConfigError(f"--compare: {config!r} matches {len(match)} configurations of run {run_id[:8]} "
                      f"({', '.join(repr(r['config']) for r in match[:5])}); give the whole name")


def default_ledger(spec_pipeline_store: Optional[str]) -> str:
    from ragcost.cost.ledger import DEFAULT_URL

    return spec_pipeline_store or DEFAULT_URL
