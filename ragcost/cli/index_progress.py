"""What `ragcost index` and `ragcost eval` show while they work: each long phase said before it starts, then its
progress with a rate and the time left -- a rich bar on a terminal, a line every second or two otherwise (CI, a pipe,
a log).

A 4,594-chunk corpus with the grounded check's sentence vectors is minutes of embedding; with no output a user
took it for hung and killed it (issue 42).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, TextIO


def duration(seconds: float) -> str:
    """'45s', '3m05s', '1h02m'."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def rate_words(done: int, total: Optional[int], elapsed: float, noun: str = "") -> str:
    """', 12.3 chunks/s, about 1m50s left' (', ... in 2m05s' at the end); under one a second, ', 4.0 s each';
    ``total`` None (a streaming reader's, not known yet): the rate alone."""
    rate = done / elapsed
    out = f", {rate:.1f}{' ' + noun if noun else ''}/s" if rate >= 1 or noun else f", {1 / rate:.1f} s each"
    if total is None:
        return out
    return out + (f", about {duration((total - done) / rate)} left" if done < total else f" in {duration(elapsed)}")


class LineProgress:
    """Off a terminal: the plan lines as they come, and ``embedded 96/1500 chunks, 12.3 chunks/s, about 1m50s left``
    at most once a second per phase (always its last), the Ray workers' counts at the end when there are any."""

    def __init__(self, workers: Optional[dict[str, int]] = None, stream: Optional[TextIO] = None, every: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.workers = workers if workers is not None else {}
        self.stream, self.every, self.clock = stream, every, clock
        self.unit: Optional[str] = None
        self.started = self.planned = self.last = 0.0
        self.said = False  # a line of this phase was printed

    def plan(self, line: str) -> None:
        self.planned = self.clock()
        print(line, file=self.stream or sys.stderr, flush=True)

    def step(self, unit: str, done: int, total: int) -> None:
        now = self.clock()
        if unit != self.unit or done == 0:
            # A phase starts with its first call: at 0 when the caller says so, else it began at the plan line.
            self.unit, self.started, self.last = unit, (now if done == 0 or not self.planned else self.planned), 0.0
            self.said = False
            if done == 0:
                return
        if now - self.last < self.every and done != total:
            return
        verb, _, noun = unit.partition(" ") if " " in unit else ("embedded", "", unit)  # "chunked documents"
        if verb in ("read", "chunked") and not self.said and now - self.started < self.every:
            return  # reading or chunking done within a second is no phase worth a line (an error after it stays one line)
        self.last, self.said = now, True
        elapsed = now - self.started
        known = total if total > 0 else None  # 0: a streaming reader, no total yet (a count and a rate, no time left)
        line = f"{verb} {done}/{total} {noun}" if known else f"{verb} {done} {noun}"
        if elapsed > 0 and done > 0:
            line += rate_words(done, known, elapsed, noun)
        if self.workers and verb == "embedded":
            line += f" (workers: {', '.join(f'{w} {n}' for w, n in sorted(self.workers.items()))})"
        print(line, file=self.stream or sys.stderr, flush=True)

    def worker(self, worker: str, n: int) -> None:
        self.workers[worker] = n


class PhaseLines:
    """Off a terminal, eval's phases (``embedding corpus``, ``embedding queries``, ``configurations`` and its
    ``searching NAME`` steps) as ``task: done/total, rate, about T left`` (``in T`` at the end), a line when the
    phase changes, at its end, and at most every ``every`` seconds between. A rate under one a second is said as
    seconds each (a configuration is measured in seconds)."""

    def __init__(self, stream: Optional[TextIO] = None, every: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.every, self.clock = stream, every, clock
        self.last_t, self.last_label = 0.0, ""
        self.starts: dict[str, tuple[float, int]] = {}

    def __call__(self, task: str, done: int, total: Optional[int]) -> None:
        now = self.clock()
        label = "configurations" if task.startswith("searching") else task
        if label not in self.starts or done == 0:
            self.starts[label] = (now, done)
        if label == self.last_label and now - self.last_t < self.every and not (total and done == total):
            return
        self.last_t, self.last_label = now, label
        line = f"{task}: {done}/{total if total is not None else '?'}"
        t0, d0 = self.starts[label]
        if total and done > d0 and now > t0:
            line += rate_words(done - d0, total - d0, now - t0)
        print(line, file=self.stream or sys.stderr, flush=True)


class BarProgress:
    """On a terminal: a rich bar per phase (done/total, rate, time left) and a row per Ray worker; plan lines are
    printed above the bars. A context manager: the bars end with it."""

    def __init__(self, console: Any) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[unit]}"), _RateColumn(), TimeRemainingColumn(),
                            console=console, transient=True)
        self.tasks: dict[str, Any] = {}
        self.workers: dict[str, int] = {}

    def __enter__(self) -> "BarProgress":
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def plan(self, line: str) -> None:
        self.bar.console.print(line, markup=False, highlight=False)

    def step(self, unit: str, done: int, total: int) -> None:
        if unit not in self.tasks:
            verb, _, noun = unit.partition(" ")
            label = {"chunked": f"chunking {noun}", "read": f"reading {noun}"}.get(verb, f"embedding {unit}")
            self.tasks[unit] = self.bar.add_task(label, total=total or None, unit=noun or unit)
        self.bar.update(self.tasks[unit], completed=done, total=total or None)  # 0: not known yet (a streaming reader)

    def worker(self, worker: str, n: int) -> None:
        self.workers[worker] = n
        key = f"worker {worker}"
        if key not in self.tasks:
            self.tasks[key] = self.bar.add_task(f"  worker {worker}", total=None, unit="chunks")
        self.bar.update(self.tasks[key], completed=n)


def _RateColumn():  # noqa: N802  (a rich column, made when rich is imported)
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text(f"{task.speed:.1f}/s" if task.speed else "")

    return RateColumn()
