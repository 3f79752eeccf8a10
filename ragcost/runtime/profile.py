"""Where a cold query's time goes: `ragcost query --profile` times each phase of the process, wall and CPU.

A first query in a fresh process pays for more than its stages: the interpreter and ragcost's CLI
starting, the pipeline file read, each stage's warm-up (the embed stage imports torch and loads the
model, retrieve opens the index, a hybrid re-rank loads its keyword index, the grounded check its
sentence vectors), then the query itself with its ledger write, then the output. Each phase is
measured as it runs (``time.perf_counter`` and the process's CPU time), and the packages it imported
are named with how many modules each brought in, so an import that could be lazy shows where it lands.
The first row runs from the process's start (``/proc/self/stat``) to the command's first line.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator

HEAVY_MODULES = 20  # a package that brings at least this many modules into the process is named


@dataclass
class Phase:
    name: str
    wall_s: float
    cpu_s: float
    imported: list[tuple[str, int]] = field(default_factory=list)  # (top-level package, modules it brought in)


def _tops() -> dict[str, int]:
    out: dict[str, int] = {}
    for name in list(sys.modules):
        top = name.split(".", 1)[0]
        out[top] = out.get(top, 0) + 1
    return out


class Profile:
    """Phases in the order they ran; ``phase(name)`` times one, ``wrap(obj, method, name)`` times a method's calls."""

    def __init__(self) -> None:
        self.phases: list[Phase] = []

    def since_start(self, name: str) -> None:
        """A phase from the process's start until now (what ran before the profile existed)."""
        from ragcost.process import started_at

        age = (datetime.now(timezone.utc).replace(tzinfo=None) - started_at()).total_seconds()
        tops = _tops()
        heavy = sorted(((t, n) for t, n in tops.items() if n >= HEAVY_MODULES), key=lambda x: -x[1])
        self.phases.append(Phase(name, max(age, 0.0), time.process_time(), heavy))

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        before, w, c = _tops(), time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            after = _tops()
            new = sorted(((t, n - before.get(t, 0)) for t, n in after.items() if n - before.get(t, 0) >= HEAVY_MODULES),
                         key=lambda x: -x[1])
            self.phases.append(Phase(name, time.perf_counter() - w, time.process_time() - c, new))

    def wrap(self, obj: Any, method: str, name: str) -> None:
        """Time each call of ``obj.method`` as the phase ``name`` (on this object only)."""
        fn = getattr(obj, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return fn(*args, **kwargs)

        setattr(obj, method, timed)

    def lines(self) -> list[str]:
        total_w = sum(p.wall_s for p in self.phases)
        total_c = sum(p.cpu_s for p in self.phases)
        width = max([len(p.name) for p in self.phases] + [len("phase")])
        out = [f"{'phase':<{width}}  {'wall s':>7}  {'cpu s':>7}  imported (modules)"]
        for p in self.phases:
            imports = ", ".join(f"{t} ({n:,})" for t, n in p.imported[:6])
            out.append(f"{p.name:<{width}}  {p.wall_s:7.2f}  {p.cpu_s:7.2f}  {imports}".rstrip())
        out.append(f"{'total':<{width}}  {total_w:7.2f}  {total_c:7.2f}  (to the last line printed; the exit follows)")
        return out
