"""`ragcost eval SPEC [--html/--csv/--parquet PATH]` and `ragcost eval --compare RUN_A RUN_B`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from ragcost.cli.query_cmd import in_range
from ragcost.cli.text import markup_safe as _m
from ragcost.urls import shown_url
from ragcost.errors import ConfigError, StoreError


def _money(v: Optional[float]) -> str:
    return "n/a (0 useful)" if v is None else f"${v:.3g}"


def _with_ci(v: Optional[float], ci: Optional[list], spec: str = ".4f") -> str:
    """``0.6600 [0.6290, 0.6890]``: the value and its 95% interval (the value alone when there is none)."""
    if v is None:
        return "n/a"
    return f"{v:{spec}} [{ci[0]:{spec}}, {ci[1]:{spec}}]" if ci else f"{v:{spec}}"


def _span(ci: Optional[list], spec: str = ".3f") -> str:
    """``0.617–0.704``: an interval compact enough for a table cell ('' when there is none)."""
    return f"{ci[0]:{spec}}–{ci[1]:{spec}}" if ci else ""


def _rel_span(v: Optional[float], ci: Optional[list]) -> str:
    """A $ interval as its ends relative to the value: ``-7%/+8%``."""
    if not ci or not v:
        return ""
    return f"{ci[0] / v - 1:+.0%}/{ci[1] / v - 1:+.0%}"


def results_table(run: Any) -> Any:
    """The terminal table: one row per measured configuration, best quality first, and under it a dim row
    with each figure's 95% bootstrap interval over the queries ($: its ends relative to the value)."""
    from rich.table import Table

    q, k0 = run.quality, run.k[0]
    cols = [q, *(m for m in run.metric_names if m != q), f"ann_recall@{k0}"]
    short = {"ndcg": "nDCG", "recall": "R", "mrr": "MRR", "precision": "P", "ann_recall": "annR"}
    from ragcost.evaluate.run import USD_BASIS

    t = Table(title=f"{_m(run.name)}: {_m(run.dataset)}, {run.queries} queries, {run.documents:,} docs / {run.chunks:,} chunks",
              caption=_m(f"{priced_as(run)}; $ is {USD_BASIS}"), header_style="bold", pad_edge=False)
    t.add_column("config", no_wrap=True)
    for c in cols:
        base, _, cut = c.partition("@")
        t.add_column(f"{short.get(base, base)}@{cut}", justify="right", no_wrap=True)
    for h in ("path p50 ms", "path p95 ms", "path p99 ms", "QPS path/search", "build s", "B/vec", "RAM MB", "$/1k q", "$/useful", ""):
        t.add_column(h, justify="right", no_wrap=h in ("$/1k q", "$/useful"))
    for r in sorted(run.ok(), key=lambda r: -r.metrics.get(q, 0)):
        mark = "★ pick" if r.recommended else "◆ front" if r.pareto else ""  # pick: cheapest within the quality margin, not the top score
        t.add_row(
            _m(r.name), *(f"{r.metrics.get(c, float('nan')):.4f}" for c in cols),
            f"{r.p50_ms:.3f}", f"{r.p95_ms:.3f}", f"{r.p99_ms:.3f}", f"{r.qps_single:,.0f}/{r.qps_batch:,.0f}",
            f"{r.build_seconds:.2f}", f"{r.bytes_per_vector:,.0f}", f"{r.index_bytes / 1e6:.1f}",
            f"{r.usd_per_1k_queries:.5f}", _money(r.usd_per_useful), mark,
            style="bold green" if r.recommended else None,
        )
        if r.ci:
            t.add_row("  95% CI", *(_span(r.ci.get(c)) for c in cols), *([""] * 7),
                      _rel_span(r.usd_per_1k_queries, r.ci.get("usd_per_1k_queries")),
                      _rel_span(r.usd_per_useful, r.ci.get("usd_per_useful")), "", style="dim")
    return t


def priced_as(run: Any) -> str:
    """What the latency and dollar columns include, and at what traffic (the caption of the results table)."""
    paths = sorted({r.path for r in run.ok()})
    what = paths[0] if len(paths) == 1 else "per configuration (--json: path)"
    traffic = (run.traffic or {}).get("label", "")
    return (f"path = what a served query waits for and pays: {what}" + (f", {traffic}" if traffic else "") +
            "; QPS: the path one at a time / one batch search alone")


def stage_table(r: Any) -> Any:
    """One configuration's dollars per stage (storage last) and per useful document."""
    from rich.table import Table

    from ragcost.cost.fmt import money_column

    title = f"{_m(r.name)}: marginal $ per stage, {r.queries} queries"
    # At least as wide as its title: rich folds a title to the table's width, and this table is narrow.
    t = Table(title=title, header_style="bold", pad_edge=False, min_width=len(title))
    for h in ("stage", "$", "useful", "$/useful"):
        t.add_column(h, justify="left" if h == "stage" else "right")
    usd = money_column([s["usd"] for s in r.stages] + [r.total_usd])
    per = money_column([s["usd_per_useful"] for s in r.stages] + [r.usd_per_useful], missing="n/a (0 useful)")
    for s, u, p in zip(r.stages, usd, per):
        t.add_row(_m(s["stage"]), u, str(s["useful"]), p)
    t.add_row("total", usd[-1], str(r.useful), per[-1], style="bold")
    return t


def calibration_line(r: Any) -> str:
    from ragcost.evaluate.calibrate import Calibration

    return Calibration(**r.calibration).line() if r.calibration else "not calibrated"


def _write_threshold(out: Any, ls: Any, run: Any, rec: Any) -> None:
    """Store the recommended configuration's threshold in the pipeline, if its scores are on the pipeline's scale."""
    from datetime import date

    from ragcost.runtime.writeback import write_useful_threshold

    cal = rec.calibration or {}
    if cal.get("threshold") is None:
        raise ConfigError(f"--write: {calibration_line(rec)}; nothing written to {ls.pipeline_path}")
    _same_scale(ls, rec)
    note = (f"`ragcost eval {ls.path}` on {run.dataset} ({run.queries} queries), config {rec.name}: precision "
            f"{cal['precision']:.3f} >= {cal['target_precision']:g}, recall {cal['recall']:.3f}, {date.today().isoformat()}")
    write_useful_threshold(ls.pipeline_path, cal["threshold"], note)
    out.print(f"wrote useful: {{judge: score, threshold: {cal['threshold']:g}}} to {_m(str(ls.pipeline_path))}", highlight=False)


def _same_scale(ls: Any, rec: Any) -> None:
    """A threshold fitted on one score scale is refused for a pipeline whose last scoring stage gives another."""
    from ragcost.runtime.load import load_pipeline
    from ragcost.runtime.writeback import last_scoring_scale
    from ragcost.stages.base import COSINE, stage_registry

    lp = load_pipeline(ls.pipeline_path)
    want, by = last_scoring_scale(lp.stage_specs)
    got = COSINE
    if rec.rerank is not None:
        cls = stage_registry.get("rerank")
        got = cls.scale_of(cls.Params(**rec.rerank)) or COSINE
    if got.name != want.name:
        raise ConfigError(f"--write: {rec.name} was scored on the {got.name} scale but the last scoring stage of "
                          f"{ls.pipeline_path} ({by!r}) gives {want.name} scores; add that stage to the pipeline "
                          f"(or evaluate a grid entry like the pipeline) and run again; nothing written")


def _progress_runner(console: Any):
    """A (run_eval progress callback, context manager) pair: rich bars on a terminal, plain lines elsewhere."""
    from contextlib import nullcontext

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from ragcost.cli.index_progress import PhaseLines

    if not console.is_terminal:
        return PhaseLines(), nullcontext()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TimeRemainingColumn(), console=console, transient=True)
    tasks: dict[str, Any] = {}

    def rich_cb(task: str, done: int, total: Optional[int]) -> None:
        if task.startswith("searching"):
            if "configurations" in tasks:
                bar.update(tasks["configurations"], description=f"configurations ({task[10:]})")
            return
        if task not in tasks:
            tasks[task] = bar.add_task(task, total=total)
        bar.update(tasks[task], completed=done, total=total)

    return rich_cb, bar


def eval_(
    spec: Optional[Path] = typer.Argument(None, help="eval spec YAML (eval/*.yaml)"),
    html: Optional[Path] = typer.Option(None, "--html", help="write a self-contained HTML report with plots here"),
    csv: Optional[Path] = typer.Option(None, "--csv", help="write the results as CSV here"),
    parquet: Optional[Path] = typer.Option(None, "--parquet", help="write the results as Parquet here"),
    ledger: Optional[str] = typer.Option(None, "--ledger", help="SQLAlchemy URL of the ledger (default: the pipeline's store)"),
    no_ledger: bool = typer.Option(False, "--no-ledger", help="do not record this run in the ledger"),
    compare: Optional[tuple[str, str]] = typer.Option(None, "--compare", help="show what changed between two recorded eval runs (ids, id prefixes, 'previous', 'last'), paired over queries; RUN:CONFIG RUN:CONFIG compares two configurations"),
    max_queries: Optional[int] = typer.Option(None, "--max-queries", callback=in_range(1, 10**9, "the number of judged queries to evaluate"), help="evaluate only the first N judged queries (N >= 1)"),
    cache_dir: Path = typer.Option(Path(".ragcost/eval"), "--cache-dir", help="where corpus and query vectors are cached"),
    write: bool = typer.Option(False, "--write", help="store the expected-useful judge (P(relevant) fit on the qrels) beside the pipeline as <pipeline>.calibration.json, and the recommended configuration's calibrated useful threshold in the pipeline YAML (useful: {judge: score, threshold: X}; left alone under judge: calibrated)"),
    half: Optional[str] = typer.Option(None, "--half", help="evaluate only a seeded half of the judged queries: fit or test (fit a judge on one half, check it on the other)"),
    half_seed: int = typer.Option(0, "--half-seed", min=0, help="the seed of --half's split (a whole number >= 0)"),
    as_json: bool = typer.Option(False, "--json", help="print the run as JSON on stdout (every figure with its 95% interval, ci) instead of the tables"),
    ablate: bool = typer.Option(False, "--ablate", help="run the pipeline with each optional stage (rerank, hybrid, guard, cache, route) removed: what each buys, with its interval, and at what price"),
    traffic: Optional[str] = typer.Option(None, "--traffic", metavar="one|serve|N", help="the traffic the $ and latency are priced at: one (a query at a time, as the price book's declared rate arrives), serve (the batch `ragcost serve`'s window forms at that rate) or N (batches of N, e.g. a batch job); default: serve when the pipeline sets serve.batch_window_ms, else one"),
    per_month: Optional[str] = typer.Option(None, "--per-month", metavar="N|observed", help="the traffic the verdict's $ a month is at: N queries a month, or observed (the ledger's query runs of this pipeline over the last 30 days, scaled to a month); default: the spec's queries_per_month, else the price book's"),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="ADDRESS", help="embed the corpus on the Ray cluster at ADDRESS (host:port as `ray start --head` prints it, or auto) instead of the pipeline's executor"),
) -> None:
    """Compare index and embedding configurations on a dataset's relevance judgments: quality, latency, bytes, dollars."""
    from rich.console import Console

    out = Console(width=None if sys.stdout.isatty() else 220)
    if compare:
        return _compare(out, compare, ledger, spec)
    if spec is None:
        raise ConfigError("give an eval spec (e.g. ragcost eval eval/cranfield-indexes.yaml) or --compare RUN_A RUN_B")
    if write and ablate:
        raise ConfigError("--write with --ablate: an ablation measures the pipeline's stages, it recommends no configuration; drop one of them")
    from ragcost.evaluate.routing import is_routing_spec

    if is_routing_spec(spec):
        return _routing(out, spec, html, csv or parquet)
    from ragcost.evaluate import results as res
    from ragcost.evaluate.report_html import write_html
    from ragcost.evaluate.run import run_eval
    from ragcost.evaluate.spec import load_spec

    failed: Optional[Exception] = None
    ls = load_spec(spec)
    if max_queries is not None:
        ls.spec.max_queries = max_queries
    if write:  # before the run: a file --write could not edit must not cost the whole evaluation
        from ragcost.atomic import check_editable

        check_editable(ls.pipeline_path)
        from ragcost.config.loader import read_yaml
        from ragcost.cost.calibration import calibration_path, check_writable

        raw = read_yaml(ls.pipeline_path)
        useful = raw.get("useful") if isinstance(raw, dict) else None
        check_writable(calibration_path(ls.pipeline_path, useful.get("calibration") if isinstance(useful, dict) else None))
    err = Console(stderr=True, soft_wrap=True)
    cb, bar = _progress_runner(err)
    if half is not None and half not in ("fit", "test"):
        raise ConfigError(f"--half {half!r}: give fit or test (the two seeded halves of the judged queries)")
    monthly = _per_month(per_month, ledger, ls) if per_month is not None else None
    with bar:
        if ablate:
            from ragcost.evaluate.ablate import run_ablation

            run = run_ablation(ls, cache_dir, progress=cb, traffic=traffic)
        else:
            run = run_eval(ls, cache_dir, progress=cb, ray_address=ray, half=(half, half_seed) if half else None,
                           traffic=traffic, per_month=monthly)
    _print_warnings(err, run)
    if as_json:
        from ragcost.evaluate.run import results_json

        out = Console(stderr=True, soft_wrap=True)  # stdout carries the JSON alone
        rec = next((r for r in run.ok() if r.recommended), None)
    else:
        rec = _print_ablation(out, run) if ablate else _print_results(out, run)
    if write and rec is None:
        raise ConfigError("--write: no configuration was measured, so there is no threshold to store")
    if not no_ledger:  # the run id first, so the files carry it; a ledger that cannot open must not lose them
        url = ledger or run.store_url
        try:
            res.record(run, url)
            res.note_recorded(run.run_id, url)  # so `eval --compare` from this folder finds it without --ledger
            out.print(f"recorded eval run {run.run_id} in {_m(shown_url(url))} (tables rc_ledger_runs, rc_eval_results)", highlight=False)
        except StoreError as e:
            failed = e
    for path, writer in ((csv, res.write_csv), (parquet, res.write_parquet), (html, write_html)):
        if path is not None:
            writer(run, path)
            out.print(f"wrote {_m(path)}", highlight=False)
    if write and rec:
        from ragcost.runtime.load import load_pipeline

        if load_pipeline(ls.pipeline_path, judge=False).config.useful.judge == "calibrated":
            _write_calibration(out, ls, run, rec)
        else:  # the threshold is what this pipeline judges by; the calibration comes along where it can
            try:
                _write_calibration(out, ls, run, rec)
            except ConfigError as e:
                out.print(f"note: {_m(str(e))}", highlight=False)
            _write_threshold(out, ls, run, rec)
    if failed is not None:
        raise StoreError(f"results not recorded: {failed}; the files above were written; rerun with --ledger URL or --no-ledger")
    out.print(f"done in {run.wall_seconds:.0f}s", highlight=False)
    if as_json:
        print(results_json(run))


def _per_month(value: str, ledger: Optional[str], ls: Any) -> tuple[int, str]:
    """--per-month: a whole number of queries a month, or the ledger's observed traffic of the pipeline."""
    v = value.strip().replace(",", "").replace("_", "")
    if v.isdigit() and int(v) >= 1:
        return int(v), "given with --per-month"
    if v != "observed":
        raise ConfigError(f"--per-month {value!r}: give a whole number of queries a month (e.g. 100000) or observed")
    from ragcost.evaluate import results as res
    from ragcost.evaluate.verdict import observed_per_month
    from ragcost.runtime.load import load_pipeline

    cfg = load_pipeline(ls.pipeline_path, judge=False).config  # its name and store: nothing opened
    return observed_per_month(res.default_ledger(ledger or cfg.store_url), cfg.name)


def _print_verdict(out: Any, run: Any) -> None:
    v = run.verdict or {}
    if not v:
        return
    from ragcost.evaluate.verdict import Verdict

    vd = Verdict(**{k: x for k, x in v.items() if k != "line"})
    style = {"switch": "bold green", "keep": "bold", "inconclusive": "bold yellow"}.get(vd.word, "bold")
    out.print(f"[{style}]{_m(vd.line())}[/]", highlight=False)
    for line in vd.details():
        out.print(f"  {_m(line)}", highlight=False)


def _print_warnings(err: Any, run: Any) -> None:
    """The run's warnings, and each built index's build warnings once (not once per swept setting)."""
    for w in run.warnings:
        err.print(f"[yellow]warning:[/] {_m(w)}", highlight=False)
    said = set()
    for r in run.ok():
        for w in r.warnings:
            key = (r.index_file, r.dim, r.precision, w)
            if key not in said:
                said.add(key)
                err.print(f"[yellow]warning:[/] {_m(Path(r.index_file).stem)} d{r.dim} {r.precision}: {_m(w)}", highlight=False)


def _print_results(out: Any, run: Any) -> Any:
    """The results table, what was not measured, and the recommendation (returned) with its stages and threshold."""
    emb = f"embedded {run.embedded_documents} documents in {run.embed_seconds:.0f}s" if run.embedded_documents else "corpus vectors from cache"
    if run.vectors_from_store:
        emb += (f" ({run.vectors_from_store} chunk vectors taken from the pipeline's store, made by the same model, "
                "not embedded again)")
    out.print(f"{emb}; query embedding {run.query_embed_ms:.1f} ms/query", highlight=False)
    out.print(results_table(run))
    others = [r for r in run.results if r.status != "ok"]
    if others:
        out.print(f"not measured ({len(others)}):", highlight=False)
        for r in others:
            out.print(f"  {_m(r.name)}: {_m(r.status)}: {_m(r.reason)}", highlight=False)
    rec = next((r for r in run.ok() if r.recommended), None)
    if rec:
        how = (f"within {run.within_pct:g}% of the best {run.quality} by its interval, and no other significantly cheaper "
               "(a saving inside the noise does not beat quality)" if (run.intervals or {}).get("resamples")
               else f"cheapest by $ per useful document within {run.within_pct:g}% of the best {run.quality}")
        out.print(f"recommended: [bold]{_m(rec.name)}[/] — {_m(run.quality)} {_m(_with_ci(rec.metrics[run.quality], rec.ci.get(run.quality)))}, "
                  f"{_money(rec.usd_per_useful)} per useful document; {_m(how)}", highlight=False)
        _print_versus(out, run, rec)
        _print_verdict(out, run)
        out.print(stage_table(rec))
        out.print(f"useful threshold for {_m(rec.name)}: {_m(calibration_line(rec))}", highlight=False)
        from ragcost.evaluate.calibrate import Calibration as Threshold

        warn = Threshold(**rec.calibration).warning() if rec.calibration else None
        if warn:
            out.print(f"[yellow]warning:[/] {_m(warn)}", highlight=False)
        from ragcost.evaluate.expected import quality_lines

        for line in quality_lines(rec.expected):
            out.print(_m(line), highlight=False)
    return rec


def _write_calibration(out: Any, ls: Any, run: Any, rec: Any) -> None:
    """Store the expected-useful judge of the configuration the pipeline runs (the recommended one when it matches)."""
    from ragcost.cost.calibration import Calibration, Model, calibration_path, save
    from ragcost.runtime.judge import pipeline_fingerprint
    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(ls.pipeline_path, judge=False)
    try:
        want = pipeline_fingerprint(pipe)
    finally:
        pipe.close()
    import json

    same = lambda r: json.dumps((r.expected or {}).get("fingerprint"), sort_keys=True, default=str) == json.dumps(want, sort_keys=True, default=str)  # noqa: E731
    match = next((r for r in [rec, *run.ok()] if r is not None and same(r)), None)
    if match is None:
        raise ConfigError(f"--write: no measured configuration is the one {ls.pipeline_path} runs (index "
                          f"{want['index']['backend']}/{want['index']['kind']} {want['index']['search'] or ''}, d{want['dim']} "
                          f"{want['precision']}, k {want['k']}); add it to the grid of {ls.path} and run again; no calibration written")
    fit = match.expected or {}
    if "error" in fit:
        raise ConfigError(f"--write: {match.name}: expected-useful judge not fit: {fit['error']}; no calibration written")
    m = fit["model"]
    cal = Calibration(Model(m["kind"], list(m["features"]), x=m.get("x", []), y=m.get("y", []), coef=m.get("coef", []),
                            intercept=m.get("intercept", 0.0), mean=m.get("mean", []), scale=m.get("scale", [])),
                      fit["fingerprint"], fit["dataset"], fit["judged"], fit["relevant"], fit["quality"],
                      f"ragcost eval {ls.path} --write")
    path = calibration_path(ls.pipeline_path, pipe.config.useful.calibration)
    save(cal, path)
    q = fit["quality"]
    out.print(f"wrote the expected-useful judge of {_m(match.name)} ({_m(fit['label'])}, held-out ECE {q['ece']:.4f}, "
              f"predicted/actual {q['ratio']:.3f}) to {_m(str(path))}; use it with useful: {{judge: calibrated}}", highlight=False)


def _print_ablation(out: Any, run: Any) -> None:
    """The full pipeline and each stage removed, then per stage what it buys (paired over the same queries)."""
    out.print(results_table(run))
    out.print(f"what each optional stage buys (full pipeline - without it, paired over {run.queries} queries, "
              f"95% bootstrap interval, sign-flip p):", highlight=False)
    for a in run.ablation:
        out.print(f"  {_m(a['line'])}", highlight=False)
    return None


def _print_versus(out: Any, run: Any, rec: Any) -> None:
    """How the intervals were made, and the pick against the best configuration, paired over the same queries."""
    from ragcost.evaluate.intervals import resampler, versus_line

    iv = run.intervals or {}
    if not iv.get("resamples"):
        return
    out.print(_m("95% CI, [lo, hi]: ") + f"{iv['level']:.0%} percentile bootstrap over {iv['queries']} queries ({iv['resamples']} resamples, "
              f"seed {iv['seed']}); $ intervals include the spread of the repeated timing rounds", highlight=False)
    if (iv.get("power") or {}).get("line"):
        out.print(_m(iv["power"]["line"]), highlight=False)
    best = max(run.ok(), key=lambda r: (r.metrics.get(run.quality, float("-inf")), -r.bytes_per_vector))
    if best is not rec:
        out.print(f"  {_m(rec.name)} vs the best {_m(best.name)}: {_m(versus_line(rec, best, run.quality, resampler(iv['queries'])))}",
                  highlight=False)


def _compare(out: Any, refs: tuple[str, str], ledger: Optional[str], spec: Optional[Path]) -> None:
    from rich.table import Table

    from ragcost.evaluate import results as res
    from ragcost.evaluate.intervals import compare_rows

    url = ledger
    if url is None and spec is not None:
        from ragcost.evaluate.spec import load_spec
        from ragcost.runtime.pipeline import Pipeline

        url = Pipeline.load(load_spec(spec).pipeline_path, judge=False).config.store_url
    (ref_a, cfg_a), (ref_b, cfg_b) = res.split_ref(refs[0]), res.split_ref(refs[1])
    if url is None:  # where this folder's `ragcost eval` recorded each run (a pipeline's store), else the default
        (url_a, ref_a), (url_b, ref_b) = (res.recorded_in(r) or (res.default_ledger(None), r) for r in (ref_a, ref_b))
    else:
        url_a = url_b = url
    id_a, rows_a = res.read_run(url_a, ref_a)
    id_b, rows_b = res.read_run(url_b, ref_b)
    if cfg_a or cfg_b:
        if not (cfg_a and cfg_b):
            raise ConfigError("--compare: name a configuration on both sides (RUN:CONFIG RUN:CONFIG, e.g. "
                              "last:dense-flat last:dense-flat+hybrid) or on neither (RUN RUN)")
        return _compare_two(out, res.find_config(rows_a, cfg_a, id_a), res.find_config(rows_b, cfg_b, id_b), id_a, id_b)
    title = f"eval run {id_a[:8]} -> {id_b[:8]} (B - A; paired over the queries both judged)"
    t = Table(title=title, header_style="bold", min_width=len(title))
    t.add_column("config", no_wrap=True)
    t.add_column("change")
    for m in res.COMPARED:
        t.add_column(m, justify="right")
    t.add_column("Δquality [95% CI], p", justify="right")
    t.add_column("$/useful Δ [95% CI]", justify="right")
    t.add_column("front A/B")
    changed = 0
    verdicts: dict[str, list[str]] = {}
    for row in res.compare(rows_a, rows_b):
        cells = []
        for m in res.COMPARED:
            a, b, d = row[m]
            cells.append("" if d is None else f"{b:.4g} ({d:+.3g})" if abs(d) > 1e-12 else f"{b:.4g} (=)")
        changed += bool(row["change"]) or any(row[m][2] not in (None, 0) for m in res.COMPARED)
        ra = next((r for r in rows_a if r["config"] == row["config"]), None)
        rb = next((r for r in rows_b if r["config"] == row["config"]), None)
        c = compare_rows(ra, rb) if ra and rb else None
        q_cell = cost_cell = ""
        if c is not None:
            words = {"better": "better", "worse": "worse", "no significant difference": "n.s."}
            q_cell = f"{c['quality'].diff.fmt('.4f', sign=True)} p={c['quality'].p:.2g} {words[c['quality'].word()]}"
            ch = c["cost"]
            cost_cell = "n/a" if ch is None else f"{ch.estimate:+.1%} [{ch.lo:+.1%}, {ch.hi:+.1%}] {words.get(c['cost_word'], c['cost_word'])}"
            verdicts.setdefault("quality", []).append(c["quality"].word())
            verdicts.setdefault("$ per useful document", []).append(c["cost_word"])
        yn = lambda v: "-" if v is None else ("yes" if v else "no")  # noqa: E731
        t.add_row(_m(row["config"]), _m(row["change"]), *cells, _m(q_cell), _m(cost_cell),
                  f"{yn(row['pareto'][0])}/{yn(row['pareto'][1])}")
    out.print(t)
    out.print(f"{changed} configuration(s) differ", highlight=False)
    for what, ws in verdicts.items():
        counts = {w: ws.count(w) for w in dict.fromkeys(ws)}
        out.print(f"{what} (paired, 95%; n.s. = no significant difference): "
                  + ", ".join(f"{n} {w}" for w, n in counts.items()), highlight=False)


def _compare_two(out: Any, ra: dict, rb: dict, id_a: str, id_b: str) -> None:
    """Two configurations (of one run or two), paired over the queries both judged."""
    from ragcost.evaluate.intervals import compare_rows

    q = ra.get("quality_metric") or "quality"
    for tag, r, rid in (("A", ra, id_a), ("B", rb, id_b)):
        ci = f" [{r['quality_lo']:.4f}, {r['quality_hi']:.4f}]" if r.get("quality_lo") is not None else ""
        per = "n/a (0 useful)" if r.get("usd_per_useful") is None else f"${r['usd_per_useful']:.3g}"
        per_ci = f" [{r['usd_per_useful_lo']:.3g}, {r['usd_per_useful_hi']:.3g}]" if r.get("usd_per_useful_lo") is not None else ""
        out.print(f"{tag}: {_m(r['config'])} (run {rid[:8]}): {q} {r['quality']:.4f}{ci}, $/useful {per}{per_ci}", highlight=False)
    c = compare_rows(ra, rb)
    if c is None:
        raise ConfigError("--compare: no per-query values for a paired test (a run recorded before intervals, "
                          "or fewer than 10 judged queries); rerun `ragcost eval` on the spec and compare the new runs")
    p = c["quality"]
    out.print(f"B - A over {c['queries']} queries: Δ{q} {p.diff.fmt('.4f', sign=True)} (95% paired bootstrap), "
              f"p={p.p:.3g} (sign-flip permutation): {p.word()}", highlight=False)
    ch = c["cost"]
    if ch is not None:
        out.print(f"$ per useful document: B/A {ch.estimate:+.1%} [{ch.lo:+.1%}, {ch.hi:+.1%}] "
                  f"(noise floor ±{c['margin']:.1%}): {c['cost_word']}", highlight=False)
    if not p.significant and c["cost_word"] in ("cheaper", "dearer"):
        cheaper = "B" if c["cost_word"] == "cheaper" else "A"
        out.print(f"no significant difference in {q}: the significantly cheaper, {cheaper} "
                  f"({_m((rb if cheaper == 'B' else ra)['config'])}), wins", highlight=False)
    elif not p.significant:
        out.print(f"no significant difference in {q} or in $ per useful document", highlight=False)


def _routing(out: Any, spec: Path, html: Optional[Path], other: Optional[Path]) -> None:
    """A routing spec: the curve over thresholds, the chosen threshold, APGR; --html plots the curve."""
    from rich.table import Table

    from ragcost.evaluate.routing import run_routing
    from ragcost.evaluate.routing_html import chosen_line, write_routing_html

    if other is not None:
        raise ConfigError("--csv/--parquet: a routing spec writes --html only (the curve is small; --html has its table)")
    r = run_routing(spec)
    title = (f"routing {_m(r.name)}: {r.queries} labelled queries, {r.needs_large} need large "
             f"(small ${r.usd_per_1k_small:.4f}, large ${r.usd_per_1k_large:.4f} per 1k)")
    t = Table(title=title, header_style="bold", pad_edge=False, min_width=len(title))
    for h in ("threshold", "share large", "recall needs-large", "precision", "$/1k queries", "PGR", "undecided"):
        t.add_column(h, justify="right")
    for p in r.curve:
        bold = r.chosen is not None and p.threshold == r.chosen.threshold
        if not bold and len(r.curve) > 25 and abs(p.threshold * 20 - round(p.threshold * 20)) > 1e-9:
            continue  # a long curve prints every 0.05 and the chosen threshold; --html has every point
        t.add_row(f"{p.threshold:g}", f"{p.share_large:.3f}", f"{p.recall_large:.3f}", f"{p.precision_large:.3f}",
                  f"{p.usd_per_1k:.4f}", f"{p.pgr:.3f}", str(p.undecided), style="bold green" if bold else None)
    out.print(t)
    out.print(f"APGR {r.apgr:.3f} (quality from {_m(r.quality_from)})", highlight=False)
    for n in r.notes:
        out.print(_m(n), highlight=False)
    out.print(f"chosen: {_m(chosen_line(r))}", highlight=False)
    if html is not None:
        write_routing_html(r, html)
        out.print(f"wrote {_m(html)}", highlight=False)
