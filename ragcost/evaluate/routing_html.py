"""The routing curve as a self-contained HTML page: recall of needs-large and $ against the share sent to large."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragcost.evaluate.report_html import _esc, scatter


def render_routing(r: Any) -> str:
    chosen = r.chosen.threshold if r.chosen else None
    pts = [{"x": p.share_large, "y": p.recall_large, "label": f"threshold {p.threshold:g}: share {p.share_large:.3f}, recall {p.recall_large:.3f}",
            "kind": "best" if p.threshold == chosen else "front"} for p in r.curve]
    cost = [{"x": p.usd_per_1k, "y": p.recall_large, "label": f"threshold {p.threshold:g}: ${p.usd_per_1k:.4f} per 1k",
             "kind": "best" if p.threshold == chosen else "front"} for p in r.curve]
    rows = "".join(
        f"<tr{' class=best' if p.threshold == chosen else ''}><td>{p.threshold:g}</td><td>{p.share_large:.3f}</td>"
        f"<td>{p.recall_large:.3f}</td><td>{p.precision_large:.3f}</td><td>{p.usd_per_1k:.4f}</td><td>{p.pgr:.3f}</td>"
        f"<td>{p.undecided}</td></tr>" for p in r.curve)
    head = (f"{r.queries} labelled queries, {r.needs_large} need large; APGR {r.apgr:.3f} (quality from {_esc(r.quality_from)}); "
            f"chosen: {_esc(chosen_line(r))}")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>routing: {_esc(r.name)}</title>
<style>body{{font-family:sans-serif;margin:24px}} td,th{{padding:2px 10px;text-align:right}} tr.best{{font-weight:bold;background:#e8f6f1}}</style>
</head><body><h1>routing: {_esc(r.name)}</h1><p>{head}</p>
{scatter(pts, "share of queries sent to large", "recall of needs-large", "recall of needs-large vs share to large")}
{scatter(cost, "$ per 1k queries", "recall of needs-large", "recall of needs-large vs $ per 1k queries")}
<table><tr><th>threshold</th><th>share large</th><th>recall</th><th>precision</th><th>$/1k</th><th>PGR</th><th>undecided</th></tr>{rows}</table>
<p>{"<br>".join(_esc(n) for n in r.notes)}</p></body></html>"""


def chosen_line(r: Any) -> str:
    if r.chosen is None:
        return r.rule
    c, w = r.chosen, r.best_within_share
    line = (f"threshold {c.threshold:g} ({r.rule}): recall {c.recall_large:.3f}, share to large {c.share_large:.3f}, "
            f"${c.usd_per_1k:.4f} per 1k queries; bar (recall >= {r.quality_floor:g} with share <= {r.target_share:g}) "
            f"{'met' if r.bar_met else 'NOT met'}")
    if not r.bar_met and w is not None:
        line += f"; within share {r.target_share:g} the best is threshold {w.threshold:g}: recall {w.recall_large:.3f}, share {w.share_large:.3f}"
    return line


def write_routing_html(r: Any, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_routing(r), encoding="utf-8")
