"""`ragcost` ends its process with ``exit_now``: what Python's exit does that has effects, without module teardown."""

from __future__ import annotations

import subprocess
import sys

from tests.cli.conftest import REPO

PROGRAM = """
import atexit, sys, threading, time
from ragcost.cli.main import exit_now

def late_worker():
    time.sleep(0.3)
    print("non-daemon thread finished", flush=True)

atexit.register(lambda: print("atexit handler ran", flush=True))
threading.Thread(target=late_worker).start()
sys.stdout.write("buffered line, never flushed by the program\\n")
print("to stderr, unflushed", file=sys.stderr, end="")
exit_now(3)
print("unreachable")
"""


def test_threads_are_waited_for_handlers_run_streams_flushed_and_the_code_kept():
    r = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 3, r.stderr
    lines = r.stdout.splitlines()
    # the thread is joined before the atexit handlers run, as in Python's own exit; the buffered write comes through
    assert lines.index("non-daemon thread finished") < lines.index("atexit handler ran")
    assert "buffered line, never flushed by the program" in lines and "unreachable" not in lines
    assert r.stderr.endswith("to stderr, unflushed")


def test_the_cli_exits_with_the_commands_code_through_its_entry_point(tmp_path):
    # a usage error (exit 2) and a bad file (exit 1): the entry point's code, one line, through exit_now
    r = subprocess.run([sys.executable, "-m", "ragcost.cli.main", "validate", str(tmp_path / "missing.yaml")],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "missing.yaml" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "ragcost.cli.main", "nosuchcommand"], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 2, r.stderr
