"""Why does a query cost more CPU beside a Python thread that holds the GIL? (issue 24, must-hold b)

    python -m bench.gil_contention [--rounds 15]

The same six queries (bench.cost_attribution's pipeline) and a fixed pure-Python control (5 x 200k
``i * i`` in the calling thread: no I/O, no GIL release of its own, a working set that fits L1),
interleaved pass by pass under each condition:

- ``alone``;
- ``thread``: an application thread in this process, a pure-Python loop + 64x64 numpy products
  (it holds the GIL most of the time), at the default switch interval (5 ms);
- ``thread@0.25ms`` / ``thread@50ms``: the same with ``sys.setswitchinterval`` changed;
- ``process``: the same loop in another process: no GIL shared; the same cores, caches, memory;
- ``spin-process``: ``while True: pass`` in another process (no numpy, a tiny working set).

The foreign work lives for the whole run and is switched on and off (an event for the thread,
SIGSTOP/SIGCONT for a process), so a pass costs no start-up. Per pass: the calling thread's CPU
(``time.thread_time``), its user and system time (``/proc/thread-self/stat``, ticks), its context
switches (``/proc/thread-self/status``), the CPU ragcost charged the queries, and how busy the
machine's CPUs were (``/proc/stat``). Each condition is compared with the ``alone`` pass of the
same round; the figures are medians of those paired ratios.

Reading: if the inflation stays with the foreign work in another process, it is the hardware; if it
goes away, it is the GIL. If the calling thread's own CPU rises as much as the charged CPU, nothing
is misattributed: the thread really burns more. If the control (no GIL release, no syscalls) rises
too, the extra is not GIL hand-offs. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.cost_attribution import TEXTS, build, own_cpu

_TICK = os.sysconf("SC_CLK_TCK")
_BURN_PROCESS = ("import threading; from bench.cost_attribution import _burn; print('ready', flush=True); "
                 "_burn(threading.Event())")
_SPIN_PROCESS = "print('ready', flush=True)\nwhile True: pass"


def thread_clock() -> dict:
    """The calling thread's CPU, user and system time (s) and context switches, from the kernel."""
    with open("/proc/thread-self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    with open("/proc/thread-self/status") as f:
        st = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
    return {"cpu": time.thread_time(), "user": int(fields[11]) / _TICK, "system": int(fields[12]) / _TICK,
            "voluntary": int(st["voluntary_ctxt_switches"]), "involuntary": int(st["nonvoluntary_ctxt_switches"])}


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def control() -> None:
    sum(i * i for i in range(200_000))


def gated_burn(on: threading.Event, quit_: threading.Event) -> None:
    import numpy as np

    x = np.random.default_rng(0).random((64, 64))
    while not quit_.is_set():
        if not on.wait(0.05):
            continue
        sum(i * i for i in range(2000))  # as bench.cost_attribution._burn: an application's own work
        x = (x @ x.T) / 64


def one_pass(s, texts: list[str]) -> dict:
    s.query("warm")  # its overhead row holds the switch of conditions
    b0 = machine_busy()
    a = thread_clock()
    charged = sum(own_cpu(s.query(t)) for t in texts)
    b = thread_clock()
    c0 = time.thread_time()
    for _ in range(5):
        control()
    c1 = time.thread_time()
    b1 = machine_busy()
    out = {k: b[k] - a[k] for k in a}
    out.update(charged=charged, control_cpu=c1 - c0,
               machine_busy=(b1[0] - b0[0]) / max(b1[1] - b0[1], 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--conditions", default="alone,thread,thread@0.25ms,thread@50ms,process,spin-process")
    args = ap.parse_args()
    import ragcost

    folder = Path(tempfile.mkdtemp(prefix="ragcost-gil-"))
    pipe, _ = build(folder)
    conds = args.conditions.split(",")
    texts = TEXTS[:6]
    default_switch = sys.getswitchinterval()
    on, quit_ = threading.Event(), threading.Event()
    th = threading.Thread(target=gated_burn, args=(on, quit_), name="app-numpy", daemon=True)
    procs = {}
    for name, code in (("process", _BURN_PROCESS), ("spin-process", _SPIN_PROCESS)):
        if name in conds:
            p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            p.stdout.readline()
            p.send_signal(signal.SIGSTOP)
            procs[name] = p
    runs: list[dict[str, dict]] = []
    try:
        with ragcost.open(pipe, ledger_url=f"duckdb:///{folder / 'ledger.duckdb'}") as s:
            s.warm_up()
            th.start()  # alive in every pass (idle unless on): the meter sees a foreign thread throughout
            s.query("warm")
            for _ in range(args.rounds):
                r: dict[str, dict] = {}
                for c in conds:
                    if c.startswith("thread"):
                        if "@" in c:
                            sys.setswitchinterval(float(c.split("@")[1].rstrip("ms")) / 1000)
                        on.set()
                    elif c in procs:
                        procs[c].send_signal(signal.SIGCONT)
                    try:
                        r[c] = one_pass(s, texts)
                    finally:
                        on.clear()
                        sys.setswitchinterval(default_switch)
                        if c in procs:
                            procs[c].send_signal(signal.SIGSTOP)
                runs.append(r)
    finally:
        quit_.set()
        for p in procs.values():
            p.kill()
            p.wait()
    med = {c: {k: statistics.median(r[c][k] for r in runs) for k in runs[0][c]} for c in conds}
    out = {"bench": "gil_contention", "rounds": args.rounds, "queries_per_pass": len(texts), "loadavg_end": os.getloadavg(),
           "medians_per_pass": med, "paired_vs_alone": {}}
    for c in conds[1:]:
        def ratio(k: str, rs=runs, c=c) -> float:
            return statistics.median(r[c][k] / r["alone"][k] for r in rs if r["alone"][k] > 0)

        def extra(k: str, rs=runs, c=c) -> float:
            return statistics.median(r[c][k] - r["alone"][k] for r in rs)

        out["paired_vs_alone"][c] = {
            "charged": ratio("charged"), "thread_cpu": ratio("cpu"), "control_cpu": ratio("control_cpu"),
            "extra_thread_cpu_s": extra("cpu"), "extra_user_s": extra("user"), "extra_system_s": extra("system"),
            "extra_voluntary_switches": extra("voluntary"), "extra_involuntary_switches": extra("involuntary"),
            "charged_over_thread_cpu": statistics.median(r[c]["charged"] / r[c]["cpu"] for r in runs),
        }
    quiet = [r for r in runs if r["alone"]["machine_busy"] < 0.6]
    out["quiet_rounds"] = {"rounds": len(quiet), "rule": "the alone pass saw the machine's CPUs under 60% busy"}
    for c in conds[1:]:
        if quiet:
            out["quiet_rounds"][c] = {k: statistics.median(r[c][k] / r["alone"][k] for r in quiet)
                                      for k in ("charged", "cpu", "control_cpu")}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
