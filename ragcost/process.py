"""This process: when it started, and whether ragcost's command owns it (so its whole life is the run's).

``ragcost query --queries`` and ``ragcost serve`` hold their instance from the moment the process
starts (imports, model loading) until it exits, not only while queries run. A process started by the
``ragcost`` command is *owned* (:func:`own`, called by the CLI's entry point): its lifetime rows start
at :func:`started_at` and are closed by an exit handler, after the last line is printed. A library
caller's process is not: there a run holds the instance for its own wall time, as before.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

_OWNED = {"on": False, "exit_now": False}
_LAST: list = []  # run by the CLI's exit_now after every atexit handler, just before the process ends
_IMPORTED_AT = datetime.now(timezone.utc).replace(tzinfo=None)  # the fallback where /proc cannot say


def own(exit_now: bool = False) -> None:
    """The ``ragcost`` command runs this process: what it starts is this process's whole life. ``exit_now``: the
    process ends through ``ragcost.cli.main.exit_now``, which runs :func:`at_exit`'s functions last."""
    _OWNED["on"] = True
    _OWNED["exit_now"] = _OWNED["exit_now"] or exit_now


def at_exit(fn: Callable[..., Any], *args: Any) -> None:
    """Call ``fn(*args)`` as late as the process allows: after every atexit handler where the CLI ends the process
    (so a lifetime closed there ends with the process), else as an atexit handler."""
    if _OWNED["exit_now"]:
        _LAST.append((fn, args))
    else:
        import atexit

        atexit.register(fn, *args)


def run_last() -> None:
    """The functions :func:`at_exit` kept, in the order given; one that fails does not stop the others."""
    import sys

    while _LAST:
        fn, args = _LAST.pop(0)
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - at exit: say it in one line, as atexit would
            print(f"warning: at exit, {getattr(fn, '__name__', fn)} failed: {type(e).__name__}: {e}", file=sys.stderr)


def owned() -> bool:
    return _OWNED["on"]


def started_at() -> datetime:
    """When this process started, naive UTC, to the kernel's clock tick (10 ms): its age from
    ``/proc/self/stat`` (start time in ticks since boot) against ``CLOCK_BOOTTIME`` now. Where
    ``/proc`` is missing (not Linux), when ragcost was first imported."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # the command name (field 2) is in parentheses and may hold spaces: split after its closing one
        fields = stat[stat.rindex(b")") + 2:].split()
        start_ticks = int(fields[19])  # field 22 of the whole line
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED_AT
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    return now - timedelta(seconds=max(age, 0.0))
