"""One indexed support-KB corpus per module, and pipelines over it that differ in one thing at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import write_corpus, write_pipeline

CACHED = [{"type": "cache"}, {"type": "retrieve", "k": 3}, {"type": "generate", "backend": "extractive"},
          {"type": "cache_write"}]


def stages(**generate) -> list[dict]:
    out = json.loads(json.dumps(CACHED))
    out[2].update(generate)
    return out


@pytest.fixture(scope="module")
def kb_folder(tmp_path_factory) -> Path:
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline

    folder = tmp_path_factory.mktemp("cache-kb")
    write_corpus(folder / "kb.jsonl")
    pipe = Pipeline.load(write_pipeline(folder, stages=CACHED))
    run_index(pipe)
    pipe.close()
    return folder


def pipeline(folder: Path, **overrides):
    from ragcost.runtime.pipeline import Pipeline

    return Pipeline.load(write_pipeline(folder, **overrides))


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of this test's own on a free port, which the test may stop and start again."""
    import shutil
    import socket
    import subprocess
    import time

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/start_redis.sh installs it)")
    pytest.importorskip("redis")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    class Server:
        url = f"redis://127.0.0.1:{port}/0"
        proc = None

        def start(self):
            self.proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                                          "--appendonly", "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
            import redis

            for _ in range(100):
                try:
                    redis.Redis(port=port).ping()
                    return
                except redis.ConnectionError:
                    time.sleep(0.05)
            raise RuntimeError("redis-server did not start")

        def stop(self):
            self.proc.kill()
            self.proc.wait()

    srv = Server()
    srv.start()
    yield srv
    if srv.proc.poll() is None:
        srv.stop()
