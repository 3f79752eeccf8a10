"""A real multi-node Ray cluster on this machine, for the Ray tests and ``bench/ray_embed.py``.

``ray start --head`` on 127.0.0.2 and ``ray start --address`` worker nodes on 127.0.0.3, .4 ...:
loopback addresses, because Ray turns 127.0.0.1 into the machine's outward address, and no
test talks to anything but loopback. Each node is started with ``--block`` in a session of its
own, so stopping the cluster ends exactly the processes it started (by their ids), never
another Ray on the machine as ``ray stop`` would. Small: one CPU and 100 MB of object store a node.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

HEAD_IP = "127.0.0.2"
OBJECT_STORE_BYTES = 100 * 1024 * 1024


def ray_binary() -> Optional[Path]:
    exe = Path(sys.executable).parent / "ray"
    return exe if exe.exists() else None


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _session_members(sids: set[int]) -> list[int]:
    """Pids of live processes in the sessions the nodes were started in (raylet, gcs, workers, actors)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) in sids and fields[0] != "Z":  # fields: state ppid pgrp session ...
            out.append(int(d.name))
    return out


class LocalRayCluster:
    """``nodes`` Ray nodes (one head) on loopback addresses; ``start()`` returns the address to join."""

    def __init__(self, nodes: int = 2, cpus_per_node: int = 1) -> None:
        self.nodes, self.cpus = nodes, cpus_per_node
        self.address = ""
        self.procs: list[subprocess.Popen] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="rcray", dir="/tmp"))  # short: Ray's socket paths have a length limit

    def node_ips(self) -> list[str]:
        return [f"127.0.0.{2 + i}" for i in range(self.nodes)]

    def _start(self, args: list[str], log: str) -> None:
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        common = ["--block", "--num-cpus", str(self.cpus), "--object-store-memory", str(OBJECT_STORE_BYTES),
                  "--disable-usage-stats"]
        with (self.tmp / log).open("w") as f:
            self.procs.append(subprocess.Popen([str(ray_binary()), "start", *args, *common], stdout=f,
                                               stderr=subprocess.STDOUT, env=env, start_new_session=True))

    def start(self, timeout: float = 120.0) -> str:
        port = _free_port(HEAD_IP)
        self.address = f"{HEAD_IP}:{port}"
        self._start(["--head", "--node-ip-address", HEAD_IP, "--port", str(port), "--include-dashboard", "false",
                     "--temp-dir", str(self.tmp)], "head.log")
        self._wait(lambda: _answers(HEAD_IP, port), timeout, "the head node's GCS")
        for ip in self.node_ips()[1:]:
            self._start(["--address", self.address, "--node-ip-address", ip], f"node-{ip}.log")
        self._wait(lambda: self._alive_nodes() == self.nodes, timeout, f"{self.nodes} live nodes")
        return self.address

    def _alive_nodes(self) -> int:
        """Active nodes as `ray status` counts them (the dashboard, and so `ray list`, is not started)."""
        r = subprocess.run([str(ray_binary()), "status", "--address", self.address], capture_output=True, text=True, timeout=60)
        if r.returncode != 0 or "Active:" not in r.stdout:
            return 0
        active = r.stdout.split("Active:", 1)[1].split("Pending:", 1)[0]
        return sum(1 for line in active.splitlines() if "node_" in line)

    def _wait(self, ok, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a Ray node exited while waiting for {what}: {self.logs()}")
            if ok():
                return
            time.sleep(0.5)
        raise RuntimeError(f"no {what} within {timeout:g}s: {self.logs()}")

    def logs(self) -> str:
        return " | ".join(f"{p.name}: {p.read_text()[-600:]}" for p in sorted(self.tmp.glob("*.log")))

    def stop(self) -> None:
        """Worker nodes first, then the head; whatever of their sessions is left is killed by pid."""
        sids = {p.pid for p in self.procs}
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        end = time.monotonic() + 10
        while _session_members(sids) and time.monotonic() < end:
            time.sleep(0.5)
        for pid in _session_members(sids):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.procs.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "LocalRayCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        return True
    except OSError:
        return False
