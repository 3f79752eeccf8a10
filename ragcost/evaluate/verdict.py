"""The verdict: switch, keep or inconclusive, for eval's pick against the pipeline as committed, in dollars a month.

eval's table ranks configurations; a team asks one question of it: should we change what we run?
The *committed* configuration is the measured one whose fingerprint (model, dim, precision,
chunking, index backend/kind/build/search, scoring stages, k) is the pipeline's own
(:func:`ragcost.runtime.judge.pipeline_fingerprint`); the *candidate* is eval's pick. Both were
measured on the same judged questions, so every difference is paired over them:

- Δquality: the mean per-question difference (candidate - committed) with its bootstrap interval
  and sign-flip p (:meth:`bootstrap.Resampler.paired`);
- Δ$ per useful document: the paired ratio of sums (``intervals.cost_change``);
- Δ$ a month: the mean per-query $ difference x the queries a month (the price book's declared
  ``queries_per_month``, the ledger's observed traffic, or a number given), with its interval.
  eval's $ is marginal work plus storage spread over the declared traffic
  (:data:`ragcost.evaluate.run.USD_BASIS`), so this is what the month's work and storage would
  change by; idle always-on capacity does not move with the configuration.

The rule (in this order):

1. the pick is the committed configuration: **keep**;
2. fewer judged questions than intervals need: **inconclusive**;
3. quality significantly better (interval above 0): **switch** (its $ a month is shown, whatever its sign);
4. cheaper beyond the noise floor (the $ a month interval below ``-margin`` x the committed month) by at
   least ``material`` dollars a month: **switch** (when quality is significantly worse, a loss inside
   the floor the spec allows, the verdict says both);
5. cheaper but by less than ``material`` a month: **keep** (immaterial in dollars);
6. significantly worse and not cheaper, dearer beyond the noise with no quality gain, the same
   quality on every question, or a quality difference under the spec's ``within_pct`` with a dollar
   difference under ``material`` either way: **keep** (nothing material to gain);
7. otherwise neither quality nor dollars tell them apart: **inconclusive**, with the questions needed
   to see the observed quality difference (:mod:`ragcost.evaluate.power`).

``material`` (the eval spec's ``material_usd_per_month``, default $10) is the team's figure for a
saving worth a change: eval cannot know what a change costs to make.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np

HOURS_PER_MONTH = 730.0
DEFAULT_MATERIAL = 10.0  # $ a month: the smallest saving the default calls worth a change (eval spec: material_usd_per_month)


@dataclass
class Verdict:
    word: str  # switch | keep | inconclusive
    why: str
    quality: str
    committed: Optional[str]  # the measured configuration the pipeline runs; None: not in the grid
    candidate: Optional[str]  # eval's pick
    queries_per_month: int
    traffic_basis: str  # where queries_per_month came from
    material_usd_per_month: float
    queries: int = 0
    delta_quality: Optional[dict[str, Any]] = None  # diff, ci, p (candidate - committed)
    quality_values: Optional[list[float]] = None  # [committed, candidate]
    usd_per_useful: Optional[list[Optional[float]]] = None  # [committed, candidate]
    delta_usd_per_useful: Optional[dict[str, Any]] = None  # relative change, its ci
    usd_per_query: Optional[list[float]] = None  # [committed, candidate]
    delta_usd_per_month: Optional[float] = None
    delta_usd_per_month_ci: Optional[list[float]] = None
    questions_needed: Optional[int] = None  # to see the observed quality difference (inconclusive only)
    judged_at_k: Optional[list[Optional[float]]] = None  # [committed, candidate]: share of their top k judged
    noise_margin: Optional[float] = None  # a relative $ difference inside this is timing noise (intervals.margin)
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line a person can act on."""
        head = f"verdict: {self.word.upper()}"
        if self.committed is None or self.candidate is None:
            return f"{head}: {self.why}"
        if self.committed == self.candidate:
            return f"{head} {self.committed}: {self.why}"
        return f"{head} ({self.committed} -> {self.candidate}): {self.why}"

    def details(self) -> list[str]:
        """The figures behind the verdict, one per line."""
        out = []
        if self.delta_quality:
            d = self.delta_quality
            ci = d.get("ci")
            span = f" [{ci[0]:+.4f}, {ci[1]:+.4f}], p={d['p']:.3g}" if ci else ""
            out.append(f"Δ{self.quality} {d['diff']:+.4f}{span} ({self.quality_values[0]:.4f} -> {self.quality_values[1]:.4f})")
        if self.usd_per_useful and self.delta_usd_per_useful:
            a, b = self.usd_per_useful
            c = self.delta_usd_per_useful
            span = f" [{c['ci'][0]:+.1%}, {c['ci'][1]:+.1%}]" if c.get("ci") else ""
            noise = (f"; inside the ±{self.noise_margin:.1%} timing noise" if self.noise_margin is not None
                     and c.get("ci") and -self.noise_margin <= c["ci"][0] and c["ci"][1] <= self.noise_margin else "")
            out.append(f"Δ$ per useful document {c['change']:+.1%}{span} (${a:.3g} -> ${b:.3g}{noise})")
        if self.delta_usd_per_month is not None:
            ci = self.delta_usd_per_month_ci
            span = f" [{money(ci[0])}, {money(ci[1])}]" if ci else ""
            out.append(f"Δ$ a month {money(self.delta_usd_per_month)}{span} at {self.queries_per_month:,} queries a month "
                       f"({self.traffic_basis}; marginal work + storage)")
        if self.judged_at_k and None not in self.judged_at_k:
            out.append(f"judged@k (share of the top k that carries a judgment): {self.judged_at_k[0]:.0%} -> {self.judged_at_k[1]:.0%}")
        return out + list(self.notes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["line"] = self.line()
        return d


def money(v: float) -> str:
    """Signed dollars with cents where they matter: +$0.02, -$1,234.50, +$3.1e-05."""
    if v == 0:
        return "$0.00"
    s = "+" if v > 0 else "-"
    a = abs(v)
    return f"{s}${a:,.2f}" if a >= 0.01 else f"{s}${a:.2g}"


def committed_of(run: Any, fingerprint: dict[str, Any]) -> Optional[Any]:
    """The measured configuration whose fingerprint is the pipeline's (None: the pipeline is not in the grid)."""
    want = json.dumps(fingerprint, sort_keys=True, default=str)
    for r in run.ok():
        got = (r.expected or {}).get("fingerprint")
        if got is not None and json.dumps(got, sort_keys=True, default=str) == want:
            return r
    return None


def describe(fp: dict[str, Any]) -> str:
    ix = fp["index"]
    search = " ".join(f"{k} {v}" for k, v in sorted((ix.get("search") or {}).items()))
    return (f"{ix['backend']}/{ix['kind']}{' ' + search if search else ''} d{fp['dim']} {fp['precision']}"
            f"{' + ' + str(len(fp['scoring'])) + ' scoring stage(s)' if fp.get('scoring') else ''}, k {fp['k']}")


def decide(run: Any, fingerprint: dict[str, Any], queries_per_month: int, traffic_basis: str,
           material: float = DEFAULT_MATERIAL) -> Verdict:
    """The verdict of ``run`` (measured, intervals attached, pick marked) for the pipeline of ``fingerprint``."""
    from ragcost.evaluate.intervals import cost_change, margin, paired_quality, resampler
    from ragcost.evaluate.power import questions_needed, detectable

    q = run.quality
    v = Verdict("inconclusive", "", q, None, None, int(queries_per_month), traffic_basis, float(material),
                queries=len(run.query_ids))
    cand = next((r for r in run.ok() if r.recommended), None)
    base = committed_of(run, fingerprint)
    v.candidate = cand.name if cand is not None else None
    v.committed = base.name if base is not None else None
    if cand is None:
        v.why = "no configuration was measured and priced, so there is nothing to recommend"
        return v
    if base is None:
        v.why = (f"the pipeline as committed ({describe(fingerprint)}) is not among the measured configurations; "
                 f"add a grid entry like it to {run.spec_path} to compare against it")
        return v
    v.quality_values = [base.metrics.get(q, math.nan), cand.metrics.get(q, math.nan)]
    v.usd_per_useful = [base.usd_per_useful, cand.usd_per_useful]
    nq = base.queries or 1
    per_q = [base.total_usd / nq, cand.total_usd / (cand.queries or 1)]
    v.usd_per_query = per_q
    v.delta_usd_per_month = (per_q[1] - per_q[0]) * queries_per_month
    v.judged_at_k = [base.judged_at_k, cand.judged_at_k]
    if cand is base:
        v.word, v.why = "keep", f"the pipeline as committed is eval's pick ({run.within_pct:g}% quality margin, $ per useful document)"
        return v
    rs = resampler(len(run.query_ids))
    pq = paired_quality(base, cand, q, rs)
    if rs is None or pq is None:
        v.why = (f"{len(run.query_ids)} judged questions: too few for intervals, so no difference can be called real "
                 f"(point estimates: Δ{q} {v.quality_values[1] - v.quality_values[0]:+.4f}, "
                 f"Δ$ a month {money(v.delta_usd_per_month)})")
        return v
    v.delta_quality = {"diff": pq.diff.estimate, "ci": pq.diff.to_list(), "p": pq.p, "significant": pq.significant}
    ch = cost_change(base, cand, rs)
    if ch is not None:
        v.delta_usd_per_useful = {"change": ch.estimate, "ci": ch.to_list()}
    month = rs.paired(base.per_query["usd"], cand.per_query["usd"])
    v.delta_usd_per_month_ci = [month.diff.lo * queries_per_month, month.diff.hi * queries_per_month]
    saving = -v.delta_usd_per_month
    base_month = per_q[0] * queries_per_month
    m = margin(base, cand)
    v.noise_margin = m
    cheaper = v.delta_usd_per_month_ci[1] < -m * base_month
    dearer = v.delta_usd_per_month_ci[0] > m * base_month
    better = pq.significant and pq.diff.estimate > 0
    worse = pq.significant and pq.diff.estimate < 0
    floor_loss = run.within_pct / 100.0 * max(v.quality_values)
    dq = f"{q} {pq.diff.estimate:+.4f} [{pq.diff.lo:+.4f}, {pq.diff.hi:+.4f}]"
    note = unjudged_note(run, base, cand)
    if note:
        v.notes.append(note)
    if better:
        v.word, v.why = "switch", (f"{q} is better ({dq}, p={pq.p:.2g}) for {money(v.delta_usd_per_month)} a month")
    elif cheaper and saving >= material:
        if worse:
            v.word, v.why = "switch", (f"saves {money(saving)[1:]} a month for a {q} loss inside the "
                                       f"{run.within_pct:g}% floor ({dq}, p={pq.p:.2g})")
        else:
            v.word, v.why = "switch", (f"saves {money(saving)[1:]} a month and the judgments see no quality difference ({dq})")
    elif cheaper:
        v.word, v.why = "keep", (f"the saving is immaterial: {money(saving)[1:]} a month, under the "
                                 f"{money(material)[1:]} a month that makes a change worth it"
                                 f"{'' if not worse else f', and {q} is worse'} ({dq})")
    elif worse:
        v.word, v.why = "keep", f"{q} is worse ({dq}, p={pq.p:.2g}) and it saves nothing beyond the timing noise"
    elif dearer:
        v.word, v.why = "keep", (f"it costs {money(v.delta_usd_per_month)} a month more and the judgments see no "
                                 f"quality gain ({dq})")
    elif np.array_equal(np.asarray(base.per_query[q]), np.asarray(cand.per_query[q])):
        v.word, v.why = "keep", (f"the same {q} on every question and no real saving ({money(v.delta_usd_per_month)} a "
                                 "month, inside the timing noise): nothing to switch for")
    elif abs(pq.diff.estimate) < floor_loss and abs(v.delta_usd_per_month) < material:
        changed = int(np.count_nonzero(np.asarray(base.per_query[q]) != np.asarray(cand.per_query[q])))
        v.word, v.why = "keep", (f"no material difference either way: {q} {pq.diff.estimate:+.4f} (under the "
                                 f"{run.within_pct:g}% the spec calls material; {changed} of {rs.n} questions score "
                                 f"differently) and {money(v.delta_usd_per_month)} a month (under "
                                 f"{money(material)[1:]})")
    else:
        det = detectable(rs, base.per_query[q], cand.per_query[q])
        v.questions_needed = questions_needed(rs.n, det, abs(pq.diff.estimate))
        need = (f"; about {v.questions_needed:,} judged questions would see a difference of {abs(pq.diff.estimate):.4f}"
                if v.questions_needed else "")
        v.word, v.why = "inconclusive", (f"neither quality ({dq}, p={pq.p:.2g}; {rs.n} questions detect "
                                         f"{det:.4f}) nor dollars ({money(v.delta_usd_per_month)} a month, inside the "
                                         f"±{m:.1%} timing noise) tell them apart{need}")
    return v


def unjudged_note(run: Any, a: Any, b: Any) -> Optional[str]:
    """Whether documents nobody judged could reverse a against b: the loser's unjudged top-k documents all
    relevant (grade 1), the winner's not; a line saying so, or None when the judgments settle it."""
    from ragcost.evaluate.metrics import evaluate

    qrels = getattr(run, "qrels", None)
    if not qrels or not a.top or not b.top:
        return None
    q, ids = run.quality, list(run.query_ids)
    qa, qb = a.metrics.get(q, math.nan), b.metrics.get(q, math.nan)
    if not (math.isfinite(qa) and math.isfinite(qb)) or qa == qb:
        return None
    winner, loser = (a, b) if qa > qb else (b, a)
    world = {i: dict(qrels.get(i, {})) for i in ids}
    added = 0
    for i, docs in zip(ids, loser.top):
        for d in docs:
            if d not in world[i]:
                world[i][d] = 1
                added += 1
    if not added:
        return None
    w, _ = evaluate(dict(zip(ids, winner.top)), world, [q])
    lo, _ = evaluate(dict(zip(ids, loser.top)), world, [q])
    if lo[q] < w[q]:
        return None
    return (f"documents nobody judged could reverse this: were the {added:,} unjudged documents in {loser.name}'s top "
            f"{run.k[0]} relevant, it would lead ({lo[q]:.4f} against {winner.name}'s {w[q]:.4f}); judge them "
            f"(ragcost judgments pool {run.spec_path}) before acting on a quality difference")


def attach_verdict(run: Any, fingerprint: dict[str, Any], queries_per_month: int, traffic_basis: str,
                   material: float = DEFAULT_MATERIAL) -> None:
    run.verdict = decide(run, fingerprint, queries_per_month, traffic_basis, material).to_dict()


def observed_per_month(ledger_url: str, pipeline: str, days: float = 30.0) -> tuple[int, str]:
    """Queries a month of ``pipeline`` as its ledger saw them: the query and serve runs of the last ``days``
    days, scaled to a month (730 h) from the span they cover when that is shorter; refused when there are none."""
    from datetime import timedelta

    from ragcost.cost.ledger import Ledger, utcnow
    from ragcost.errors import ConfigError

    since = utcnow() - timedelta(days=days)
    with Ledger(ledger_url, read_only=True) as ledger:
        qrows, _ = ledger.read(since=since, pipeline=pipeline)
    ats = [r["at"] for r in qrows if r.get("kind") == "query" and r.get("at") is not None]
    if not ats:
        raise ConfigError(f"--per-month observed: the ledger holds no query of pipeline {pipeline!r} in the last "
                          f"{days:g} days; give a number (--per-month 100000) or leave it out for the price book's "
                          "declared traffic")
    span_h = max((max(ats) - min(ats)).total_seconds() / 3600, 1.0)  # at least an hour: a burst is not a rate
    hours = min(span_h, days * 24)
    n = int(round(len(ats) * HOURS_PER_MONTH / hours))
    return max(n, 1), f"observed in the ledger: {len(ats):,} queries over {hours:,.1f} h"
