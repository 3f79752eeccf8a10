"""Wait until this machine's CPUs are quiet, then print one line saying how long that took and what was busy.

The `serial` tests compare CPU-seconds measured at two moments; a process left over from the parallel part
(a server still flushing, a worker still exiting) makes one of them dearer. Quiet: busy under BUSY of the
machine for QUIET_S seconds in a row, read from /proc/stat; give up (and say so) after LIMIT_S. Never fails
the run: what it prints says what the serial tests ran beside.
"""

from __future__ import annotations

import os
import sys
import time

BUSY, QUIET_S, LIMIT_S = 0.15, 3, 90


def _cpu() -> tuple[int, int]:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v[:8]) - idle, sum(v[:8])


def _procs() -> dict[str, int]:
    out = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    s = f.read()
                rest = s[s.rindex(")") + 2:].split()
                out[f"{pid} {s[s.index('(') + 1:s.rindex(')')]}"] = int(rest[11]) + int(rest[12])
            except (OSError, ValueError, IndexError):
                pass
    return out


def main() -> int:
    if not os.path.exists("/proc/stat"):
        return 0
    t0, quiet, busy = time.monotonic(), 0, 1.0
    while time.monotonic() - t0 < LIMIT_S:
        (b0, a0), p0 = _cpu(), _procs()
        time.sleep(1)
        (b1, a1), p1 = _cpu(), _procs()
        busy = (b1 - b0) / max(a1 - a0, 1)
        quiet = quiet + 1 if busy < BUSY else 0
        if quiet >= QUIET_S:
            print(f"wait_quiet: machine quiet after {time.monotonic() - t0:.0f} s (busy {busy:.0%} over the last second)")
            return 0
    top = sorted(((p1[k] - p0.get(k, 0), k) for k in p1), reverse=True)[:5]
    print(f"wait_quiet: still {busy:.0%} busy after {LIMIT_S} s; the busiest processes over the last second "
          f"(clock ticks): {', '.join(f'{k} {t}' for t, k in top if t > 0) or 'none of ours'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
