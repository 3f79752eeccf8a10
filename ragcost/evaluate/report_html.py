"""A self-contained HTML report: inline SVG plots (no script, nothing fetched) and the results table."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any, Optional, Sequence

W, H = 620, 380
PAD_L, PAD_R, PAD_T, PAD_B = 70, 20, 46, 50
COLORS = {"front": "#d95f02", "other": "#7f8c8d", "best": "#1b9e77"}


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        step = max(1, (b - a) // 6)
        return [10.0 ** e for e in range(a, b + 1, step)]
    span = hi - lo or abs(hi) or 1.0
    raw = span / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 2) if start + i * step <= hi + step * 0.01]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000 or abs(v) < 0.01:
        return f"{v:.1e}"
    return f"{v:.3g}"


def scatter(points: Sequence[dict], x_label: str, y_label: str, title: str, log_x: bool = False) -> str:
    """An SVG scatter plot; each point is {x, y, label, kind: front|other|best}; hover shows the label."""
    pts = [p for p in points if p["x"] is not None and p["y"] is not None and (not log_x or p["x"] > 0)]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img">',
           f'<title>{_esc(title)}</title><rect width="{W}" height="{H}" fill="#fff"/>',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">{_esc(title)}</text>']
    if not pts:
        out.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">no measured configurations</text></svg>')
        return "".join(out)
    # the axes hold the error bars too, not only the points
    xs = [v for p in pts for v in (p["x"], p.get("xlo"), p.get("xhi")) if v is not None and (not log_x or v > 0)]
    ys = [v for p in pts for v in (p["y"], p.get("ylo"), p.get("yhi")) if v is not None]
    x0, x1 = min(xs), max(xs)
    log_x = log_x and x1 / x0 > 20  # a narrow range reads better, and gets ticks, on a linear axis
    x_label = x_label if log_x else x_label.replace(" (log)", "")
    y0, y1 = min(ys), max(ys)
    if log_x:
        x0, x1 = x0 / 1.3, x1 * 1.3
    else:
        dx = (x1 - x0) * 0.05 or abs(x0) * 0.05 or 1.0
        x0, x1 = x0 - dx, x1 + dx
    dy = (y1 - y0) * 0.08 or abs(y0) * 0.05 or 0.01
    y0, y1 = y0 - dy, y1 + dy
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def sx(v: float) -> float:
        f = (math.log10(v) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) if log_x else (v - x0) / (x1 - x0)
        return PAD_L + f * pw

    def sy(v: float) -> float:
        return PAD_T + ph - (v - y0) / (y1 - y0) * ph

    out.append(f'<rect x="{PAD_L}" y="{PAD_T}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#333"/>')
    for t in _ticks(x0, x1, log_x):
        if x0 <= t <= x1:
            x = sx(t)
            out.append(f'<line x1="{x:.1f}" y1="{PAD_T}" x2="{x:.1f}" y2="{PAD_T + ph}" stroke="#e3e3e3"/>'
                       f'<text x="{x:.1f}" y="{PAD_T + ph + 16}" text-anchor="middle" font-size="11">{_fmt(t)}</text>')
    for t in _ticks(y0, y1, False):
        if y0 <= t <= y1:
            y = sy(t)
            out.append(f'<line x1="{PAD_L}" y1="{y:.1f}" x2="{PAD_L + pw}" y2="{y:.1f}" stroke="#e3e3e3"/>'
                       f'<text x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{_fmt(t)}</text>')
    out.append(f'<text x="{PAD_L + pw / 2}" y="{H - 10}" text-anchor="middle" font-size="12">{_esc(x_label)}</text>'
               f'<text transform="translate(16 {PAD_T + ph / 2}) rotate(-90)" text-anchor="middle" font-size="12">{_esc(y_label)}</text>')
    for p in pts:  # 95% intervals as error bars, under the points
        if p.get("ylo") is not None:
            x, a, b = sx(p["x"]), sy(max(p["ylo"], y0)), sy(min(p["yhi"], y1))
            out.append(f'<line class="ci" x1="{x:.1f}" y1="{a:.1f}" x2="{x:.1f}" y2="{b:.1f}" stroke="#555" stroke-width="1"/>')
        if p.get("xlo") is not None and (not log_x or p["xlo"] > 0):
            y, a, b = sy(p["y"]), sx(max(p["xlo"], x0)), sx(min(p["xhi"], x1))
            out.append(f'<line class="ci" x1="{a:.1f}" y1="{y:.1f}" x2="{b:.1f}" y2="{y:.1f}" stroke="#555" stroke-width="1"/>')
    for kind in ("other", "front", "best"):  # the highlighted points are drawn last, on top
        for p in pts:
            if p["kind"] != kind:
                continue
            r = 7 if kind == "best" else 5
            out.append(f'<circle cx="{sx(p["x"]):.1f}" cy="{sy(p["y"]):.1f}" r="{r}" fill="{COLORS[kind]}" '
                       f'fill-opacity="{0.9 if kind != "other" else 0.55}" stroke="#222" stroke-width="0.6">'
                       f'<title>{_esc(p["label"])}</title></circle>')
    for i, (kind, text) in enumerate((("front", "Pareto front"), ("best", "recommended"), ("other", "dominated"))):
        lx, y = PAD_L + 10 + i * 120, PAD_T - 12  # one line above the plot area, never over a point
        out.append(f'<circle cx="{lx}" cy="{y}" r="5" fill="{COLORS[kind]}"/><text x="{lx + 10}" y="{y + 4}" font-size="11">{text}</text>')
    out.append("</svg>")
    return "".join(out)


def bars(items: Sequence[tuple[str, float]], title: str, unit: str) -> str:
    """A horizontal SVG bar chart of (label, value)."""
    row, label_w = 18, 230
    h = PAD_T + row * max(len(items), 1) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img">',
           f'<title>{_esc(title)}</title><rect width="{W}" height="{h}" fill="#fff"/>',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">{_esc(title)}</text>']
    top = max((v for _, v in items), default=1.0) or 1.0
    bw = W - label_w - 80
    for i, (label, v) in enumerate(items):
        y = PAD_T + i * row
        w = max(1.0, v / top * bw)
        out.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end" font-size="11">{_esc(label)}</text>'
                   f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row - 5}" fill="#4a77b4"><title>{_esc(label)}: {v:,.1f} {unit}</title></rect>'
                   f'<text x="{label_w + w + 4:.1f}" y="{y + 12}" font-size="11">{v:,.0f}</text>')
    out.append("</svg>")
    return "".join(out)


def reliability(fit: Optional[dict], title: str) -> str:
    """A reliability diagram of the expected-useful judge (``ConfigResult.expected``): per P(relevant) bucket of
    its held-out predictions, the mean predicted probability (x) against the share the qrels call relevant (y)."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot reliability" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img">',
           f'<title>{_esc(title)}</title><rect width="{W}" height="{H}" fill="#fff"/>',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">{_esc(title)}</text>']
    q = (fit or {}).get("quality") or {}
    rows = [b for b in q.get("buckets") or [] if b.get("documents")]
    if not rows:
        why = (fit or {}).get("error") or "no expected-useful judge was fit"
        out.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" font-size="12">{_esc(why[:90])}</text></svg>')
        return "".join(out)
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def sx(v: float) -> float:
        return PAD_L + v * pw

    def sy(v: float) -> float:
        return PAD_T + ph - v * ph

    out.append(f'<rect x="{PAD_L}" y="{PAD_T}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#333"/>')
    for t in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        out.append(f'<line x1="{sx(t):.1f}" y1="{PAD_T}" x2="{sx(t):.1f}" y2="{PAD_T + ph}" stroke="#e3e3e3"/>'
                   f'<text x="{sx(t):.1f}" y="{PAD_T + ph + 16}" text-anchor="middle" font-size="11">{t:.1f}</text>'
                   f'<line x1="{PAD_L}" y1="{sy(t):.1f}" x2="{PAD_L + pw}" y2="{sy(t):.1f}" stroke="#e3e3e3"/>'
                   f'<text x="{PAD_L - 6}" y="{sy(t) + 4:.1f}" text-anchor="end" font-size="11">{t:.1f}</text>')
    out.append(f'<line class="diagonal" x1="{sx(0):.1f}" y1="{sy(0):.1f}" x2="{sx(1):.1f}" y2="{sy(1):.1f}" stroke="#999" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{PAD_L + pw / 2}" y="{H - 10}" text-anchor="middle" font-size="12">predicted P(relevant), bucket mean</text>'
               f'<text transform="translate(16 {PAD_T + ph / 2}) rotate(-90)" text-anchor="middle" font-size="12">share relevant by the qrels</text>')
    most = max(b["documents"] for b in rows)
    pts = []
    for b in rows:
        n = b["documents"]
        x, y = b["predicted"] / n, b["actual"] / n
        pts.append((x, y))
        r = 3 + 6 * math.sqrt(n / most)  # area grows with the bucket's documents
        out.append(f'<circle class="bucket" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{r:.1f}" fill="{COLORS["front"]}" fill-opacity="0.8" '
                   f'stroke="#222" stroke-width="0.6"><title>P {b["lo"]:.1f}-{b["hi"]:.1f}: {n} documents, predicted '
                   f'{b["predicted"]:.1f} useful, qrels {b["actual"]:.0f}</title></circle>')
    out.append('<polyline fill="none" stroke="#d95f02" stroke-width="1.2" points="'
               + " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts) + '"/>')
    ratio = "n/a" if q.get("ratio") is None else f"{q['ratio']:.3f}"
    out.append(f'<text x="{PAD_L + 8}" y="{PAD_T + 16}" font-size="11">held-out ({q.get("folds", "?")}-fold over {q.get("queries", "?")} '
               f'queries): ECE {q.get("ece", float("nan")):.4f}, predicted / qrels useful {ratio}</text>')
    out.append("</svg>")
    return "".join(out)


def _kind(r: Any) -> str:
    return "best" if r.recommended else "front" if r.pareto else "other"


def _money(v: Optional[float]) -> str:
    return "n/a (0 useful)" if v is None else f"${v:.3g}"


def _ci(r: Any, name: str, spec: str = ".4f", value: bool = True) -> str:
    """``0.6600 [0.6290, 0.6890]`` (value=False: the interval alone; '' when there is none)."""
    ci = r.ci.get(name) if getattr(r, "ci", None) else None
    v = r.usd_per_useful if name == "usd_per_useful" else r.metrics.get(name, float("nan"))
    iv = f"[{ci[0]:{spec}}, {ci[1]:{spec}}]" if ci else ""
    if not value:
        return iv
    return f"{v:{spec}} {iv}".strip() if v is not None else "n/a"


def _bars(r: Any, q: str, x: Optional[str]) -> dict:
    out: dict = {}
    if q in r.ci:
        out["ylo"], out["yhi"] = r.ci[q]
    if x and x in r.ci:
        out["xlo"], out["xhi"] = r.ci[x]
    return out


def _priced_as(run: Any) -> str:
    paths = sorted({r.path for r in run.ok()})
    what = paths[0] if len(paths) == 1 else "; ".join(f"{r.name}: {r.path}" for r in run.ok())
    return f"latency and $ are the path a served query takes ({what}), {(run.traffic or {}).get('label', '')}"


def render(run: Any) -> str:
    """The whole report as one HTML string."""
    ok = run.ok()
    q = run.quality
    k0 = run.k[0]
    p1 = [dict(x=r.usd_per_useful, y=r.metrics.get(q), label=f"{r.name}: {q} {_ci(r, q)}, {_money(r.usd_per_useful)}/useful {_ci(r, 'usd_per_useful', '.3g')}",
               kind=_kind(r), **_bars(r, q, "usd_per_useful")) for r in ok]
    p2 = [dict(x=r.p95_ms, y=r.metrics.get(q), label=f"{r.name}: {q} {_ci(r, q)}, p95 {r.p95_ms:.3f} ms", kind=_kind(r),
               **_bars(r, q, None)) for r in ok]
    builds: dict[str, float] = {}
    for r in ok:
        label = f"{Path(r.index_file).stem} d{r.dim} {r.precision}"
        builds.setdefault(label, r.bytes_per_vector)
    metric_cols = [*run.metric_names, *(f"ann_recall@{k}" for k in run.k)]
    head = ["config", *metric_cols, "path p50 ms", "path p95 ms", "path p99 ms", "QPS path", "QPS search batch", "build s", "B/vector",
            "index MB", "$/1k queries", f"useful@{k0}", "$/useful", "front"]
    rows = []
    for r in sorted(ok, key=lambda r: -r.metrics.get(q, 0)):
        cls = "best" if r.recommended else "front" if r.pareto else ""
        cells = [r.name, *(_ci(r, m) for m in metric_cols),
                 f"{r.p50_ms:.3f}", f"{r.p95_ms:.3f}", f"{r.p99_ms:.3f}", f"{r.qps_single:,.0f}", f"{r.qps_batch:,.0f}",
                 f"{r.build_seconds:.2f}", f"{r.bytes_per_vector:,.1f}", f"{r.index_bytes / 1e6:.2f}",
                 f"${r.usd_per_1k_queries:.5f}", str(r.useful), f"{_money(r.usd_per_useful)} {_ci(r, 'usd_per_useful', '.3g', value=False)}",
                 "recommended" if r.recommended else "yes" if r.pareto else ""]
        rows.append(f'<tr class="{cls}">' + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
    others = [r for r in run.results if r.status != "ok"]
    rec = next((r for r in ok if r.recommended), None)
    warn = "".join(f"<li>{_esc(w)}</li>" for w in run.warnings)
    skipped = "".join(f"<li><b>{_esc(r.name)}</b> ({r.status}): {_esc(r.reason)}</li>" for r in others)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ragcost eval: {_esc(run.name)}</title>
<style>
body{{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;background:#fff}}
h1{{font-size:22px}} .plots{{display:flex;flex-wrap:wrap;gap:16px}} .plot{{border:1px solid #ccc;background:#fff}}
table{{border-collapse:collapse;font-size:12px;margin-top:12px}} td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap}}
td:first-child,th:first-child{{text-align:left;white-space:nowrap}} tr.front td{{background:#fdebd9}} tr.best td{{background:#d5f0e6;font-weight:bold}}
.meta{{color:#555;font-size:13px}}
</style></head><body>
<h1>ragcost eval: {_esc(run.name)}</h1>
<p class="meta">dataset <b>{_esc(run.dataset)}</b>: {run.documents:,} documents, {run.chunks:,} chunks, {run.queries} judged queries;
pipeline <b>{_esc(run.pipeline)}</b> (model dim {run.native_dim}); price book {_esc(run.price_book_version)};
query embedding {run.query_embed_ms:.1f} ms/query; run {_esc(run.run_id or "(not recorded)")} at {_esc(run.started_at)}, {run.wall_seconds:.0f} s.</p>
<p class="meta">Priced as served: {_esc(_priced_as(run))}.</p>
<p>Quality is <b>{_esc(q)}</b>. Pareto front over ({_esc(q)} &uarr;, $ per useful document &darr;, p95 latency &darr;).
Recommendation (cheapest by $ per useful document within {run.within_pct:g}% of the best {_esc(q)}; with intervals: within
by the interval of its quality relative to the best, and cheaper only where the saving is significant):
<b>{_esc(rec.name if rec else "none")}</b>. A useful document is one in the top {k0} with qrels score &ge; 1.</p>
{verdict_section(run)}
{_interval_note(run)}
{"<ul>" + warn + "</ul>" if warn else ""}
{ablation_section(run)}
<div class="plots">
{scatter(p1, "$ per useful retrieved document (log)", q, f"{q} vs $ per useful document", log_x=True)}
{scatter(p2, "p95 search latency, ms (log)", q, f"{q} vs p95 latency", log_x=True)}
{bars(list(builds.items()), "bytes per vector (index)", "bytes")}
{_reliability_of(ok, rec, q)}
</div>
<table><thead><tr>{"".join(f"<th>{_esc(h)}</th>" for h in head)}</tr></thead><tbody>
{"".join(rows)}
</tbody></table>
{"<h2>Not measured</h2><ul>" + skipped + "</ul>" if skipped else ""}
</body></html>
"""


def verdict_section(run: Any) -> str:
    """Switch, keep or inconclusive against the pipeline as committed, with the figures behind it."""
    v = getattr(run, "verdict", None) or {}
    if not v:
        return ""
    from ragcost.evaluate.verdict import Verdict

    vd = Verdict(**{k: x for k, x in v.items() if k != "line"})
    colour = {"switch": "#d5f0e6", "keep": "#e8eef8", "inconclusive": "#fdf3d5"}.get(vd.word, "#eee")
    items = "".join(f"<li>{_esc(x)}</li>" for x in vd.details())
    return (f'<div class="verdict" style="background:{colour};border:1px solid #bbb;padding:8px 12px;margin:12px 0">'
            f'<b>{_esc(vd.line())}</b>{"<ul>" + items + "</ul>" if items else ""}</div>')


def _reliability_of(ok: Sequence[Any], rec: Any, q: str) -> str:
    """The reliability diagram of the recommended configuration's judge (else the best by quality)."""
    r = rec or max(ok, key=lambda x: x.metrics.get(q, 0), default=None)
    if r is None or getattr(r, "expected", None) is None:
        return ""
    label = r.expected.get("label", "") if isinstance(r.expected, dict) else ""
    return reliability(r.expected, f"expected-useful judge of {r.name}" + (f" ({label})" if label else ""))

def _interval_note(run: Any) -> str:
    iv = getattr(run, "intervals", None) or {}
    if not iv.get("resamples"):
        return f'<p class="meta">{_esc(iv.get("note", "no intervals"))}</p>' if iv else ""
    return (f'<p class="meta">[lo, hi] and the error bars: {iv["level"]:.0%} percentile bootstrap over {iv["queries"]} queries '
            f'({iv["resamples"]} resamples, seed {iv["seed"]}), one resample set shared by every configuration; $ intervals '
            "also include the spread of the repeated timing rounds. A cheaper pick is made only when the saving is significant.</p>")


def ablation_section(run: Any) -> str:
    """The --ablate table (each optional stage removed), when the run has one."""
    rows = getattr(run, "ablation", None) or []
    if not rows:
        return ""
    head = ["stage removed", "config", "Δquality [95% CI]", "p", "Δ$/query", "$ per marginal useful", "verdict"]
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in (
        a["stage"], a["config"], a["delta_text"], f"{a['p']:.3g}" if a.get("p") is not None else "", a["usd_text"],
        a["marginal_text"], a["verdict"])) + "</tr>" for a in rows)
    return (f"<h2>Stage ablation</h2><p>What each optional stage buys: the pipeline with that stage removed, paired over the "
            f"same queries.</p><table><thead><tr>{''.join(f'<th>{_esc(h)}</th>' for h in head)}</tr></thead><tbody>{body}</tbody></table>")


def write_html(run: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(run), encoding="utf-8")
