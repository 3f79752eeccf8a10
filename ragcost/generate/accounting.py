"""What a batch of generation attempts is billed for: tokens when the server did not say, busy periods, the stage's remainder.

The rules (docs/tasks/vllm.md, "How an attempt is billed", says the same, with an example):

- **Tokens.** The server's ``usage`` counts stand. When an attempt reached the model (it
  succeeded, or the server answered with a status below 400, or content arrived) and a count is
  missing, it is counted here: with the served model's tokenizer when ``tokenizer:`` points at
  it, else ~4 characters a token. Input = the prompt sent (system and user text joined by a blank
  line; chat-template tokens are not counted); output = the text received, and never fewer than
  the content chunks received (each carries at least one token). Such a record says
  ``tokens_estimated=True``. An attempt refused or answered with an HTTP error bills no tokens.
- **Busy periods are per endpoint.** The endpoint is ``(base_url, model)`` for a server and the
  backend object for an in-process engine (:meth:`Generator.endpoint`). Within one stage call,
  the attempts on one (resource, endpoint) form busy periods: maximal intervals during which at
  least one of them was in flight (request sent to last byte). Two endpoints on one price-book
  resource are two busy periods, never one.
- **Shares by duration.** An attempt of a period pays ``busy_share = its duration / the sum of the
  durations of the period's attempts`` (equal shares when every duration is 0); its record's
  ``wall_seconds`` is the period's length, ``shared_by`` the period's attempts, and ``call_id``
  is shared by them. The shares of a period sum to 1, so the period is paid exactly once.
- **Shares by work, where the engine says.** The requests of an in-process batch (``vllm-offline``)
  all start and end with one ``LLM.generate`` call, so their durations are equal and say nothing.
  When every attempt of a period carries ``work`` (the engine-seconds it was scheduled for, or the
  tokens it made the engine process), the shares go by that instead; ``notes.share_by`` names
  the basis (``duration``, ``engine_s`` or ``tokens``).
- **The stage's remainder.** The stage call's wall time less the union of all its attempts'
  spans (prompt building, batch-window and backoff waits, opening clients) is one busy period on
  the pipeline's resource, reported as one record per query of the batch, stage
  ``<stage>/overhead``, ``busy_share = 1/queries``.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ragcost.generate.attempt import USAGE_LOCAL, Attempt
from ragcost.generate.prompt import Prompt
from ragcost.cost.compute import new_id
from ragcost.records import UsageRecord

OVERHEAD = "overhead"  # the stage-name suffix of the remainder's records
USAGE_COUNTED = "counted"  # missing counts taken with the served model's tokenizer
USAGE_ESTIMATED = "estimated"  # missing counts estimated at ~4 characters a token


def reached_model(att: Attempt) -> bool:
    """Whether the model saw the prompt: a success, a response that began (< 400), or content received."""
    return att.ok or att.chunks > 0 or (att.status is not None and att.status < 400)


def fill_missing_usage(att: Attempt, prompt: Prompt, count: Callable[[str], int], exact: bool) -> None:
    """Count the input and output tokens the server did not report (see the module's rules)."""
    if att.usage_source == USAGE_LOCAL or not reached_model(att):
        return
    filled = False
    if att.prompt_tokens is None:
        att.prompt_tokens, filled = count(prompt.text()), True
    if att.output_tokens is None:
        att.output_tokens, filled = max(count(att.text) if att.text else 0, att.chunks), True
    if filled:
        att.tokens_estimated = True
        att.usage_source = USAGE_COUNTED if exact else USAGE_ESTIMATED


def busy_seconds(spans: Sequence[tuple[float, float]]) -> float:
    """Length of the union of [start, end] spans: the time at least one request was in flight."""
    return sum(end - start for start, end in _merged(spans))


def _merged(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def busy_periods(attempts: Sequence[Attempt]) -> list[tuple[float, list[Attempt]]]:
    """Attempts grouped into maximal overlapping intervals, each with its length in seconds."""
    periods: list[tuple[float, float, list[Attempt]]] = []
    for a in sorted(attempts, key=lambda a: (a.start, a.end)):
        if periods and a.start <= periods[-1][1]:
            s, e, group = periods[-1]
            group.append(a)
            periods[-1] = (s, max(e, a.end), group)
        else:
            periods.append((a.start, a.end, [a]))
    return [(e - s, group) for s, e, group in periods]


def share_basis(attempts: Sequence[Attempt]) -> str:
    """What a period's shares go by: the attempts' common work unit when every one has work, else duration."""
    units = {a.work_unit for a in attempts}
    if len(units) == 1 and all(a.work is not None and a.work >= 0 for a in attempts) and sum(a.work for a in attempts) > 0:
        return units.pop() or "work"
    return "duration"


def shares(attempts: Sequence[Attempt]) -> list[float]:
    """Each attempt's part of its busy period: its work (see ``share_basis``), else its duration, over the period's sum."""
    if share_basis(attempts) != "duration":
        used = [float(a.work) for a in attempts]
    else:
        used = [max(a.e2e, 0.0) for a in attempts]
    total = sum(used)
    if total <= 0:
        return [1.0 / len(attempts)] * len(attempts)
    return [d / total for d in used]


def period_fields(attempts: Sequence[Attempt]) -> dict[int, dict]:
    """For every attempt (by ``id``): the record fields of its busy period on its (resource, endpoint)."""
    groups: dict[tuple[str, str], list[Attempt]] = {}
    for a in attempts:
        groups.setdefault((a.resource, a.endpoint), []).append(a)
    out: dict[int, dict] = {}
    for group in groups.values():
        for seconds, period in busy_periods(group):
            call_id, basis = new_id(), share_basis(period)
            for a, share in zip(period, shares(period)):
                out[id(a)] = {"wall_seconds": seconds, "busy_share": share, "shared_by": len(period), "call_id": call_id,
                              "share_by": basis}
    return out


def overhead_records(stage: str, resource: str, stage_wall: float, attempts: Sequence[Attempt], queries: int) -> list[UsageRecord]:
    """One record per query: its equal share of the stage's time outside every attempt, on ``resource``."""
    if queries < 1:
        return []
    inside = busy_seconds([(a.start, a.end) for a in attempts])
    remainder = max(stage_wall - inside, 0.0)
    call_id = new_id()
    notes = {"stage_wall_s": stage_wall, "attempts_busy_s": inside}
    return [UsageRecord(stage=f"{stage}/{OVERHEAD}", resource=resource, wall_seconds=remainder, items=1, calls=1,
                        shared_by=queries, busy_share=1.0 / queries, call_id=call_id, notes=dict(notes))
            for _ in range(queries)]
