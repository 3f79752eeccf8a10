"""One indexed tiny corpus per test module (extractive generation), and a real uvicorn server on a free port."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragcost.cli.main import main
from tests.cli.conftest import write_corpus, write_pipeline

KEYS = {
    "key-acme": {"tenant": "acme", "filter": {"tenant": "acme"}},
    "key-globex": {"tenant": "globex", "filter": {"tenant": "globex"}},
}


def make_pipeline(folder: Path, keys: bool = False, **serve) -> Path:
    write_corpus(folder / "kb.jsonl")
    extra = {}
    if keys:
        (folder / "keys.json").write_text(json.dumps(KEYS), encoding="utf-8")
        serve["keys"] = "file:keys.json"
    p = write_pipeline(folder, stages=[{"type": "retrieve", "k": 3}, {"type": "generate", "backend": "extractive"}],
                       serve={"batch_window_ms": 20, "max_batch": 64, **serve}, **extra)
    assert main(["index", str(p)]) == 0
    return p


def variant(pipeline: Path, file: str, **overrides) -> Path:
    """Another pipeline file over the same store and index (same name, corpus and build), e.g. other serve settings."""
    cfg = json.loads(pipeline.read_text(encoding="utf-8"))
    cfg.update(overrides)
    p = pipeline.with_name(file)
    p.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return p


def _register_slow_backend() -> None:
    """``slow-words``: the extractive answer streamed a word every 50 ms, so a client can leave mid-stream."""
    import asyncio
    from time import perf_counter

    from ragcost.generate import generator_registry
    from ragcost.generate.extractive import Extractive, extract

    if "slow-words" in generator_registry:
        return

    @generator_registry.register("slow-words")
    class SlowWords(Extractive):
        async def generate(self, prompt, attempt, on_text) -> None:
            attempt.start = perf_counter()
            text, _ = extract(prompt.question, prompt, self.params.sentences)
            for word in text.split(" "):
                await asyncio.sleep(0.05)
                on_text(word + " ")
            attempt.text, attempt.end, attempt.ok, attempt.chunks = text, perf_counter(), True, 1
            attempt.usage_source = "local"


_register_slow_backend()


def _register_word_guard() -> None:
    """``mentions``: flags an answer holding ``word`` (a stand-in for a classifier that flags some answers)."""
    from pydantic import Field

    from ragcost.guards import guard_registry
    from ragcost.guards.base import Finding, Guard, GuardParams

    if "mentions" in guard_registry:
        return

    class MentionsParams(GuardParams):
        word: str = Field(min_length=1)

    @guard_registry.register("mentions")
    class Mentions(Guard):
        name = "mentions"
        Params = MentionsParams
        targets = ("answer",)
        policies = ("block", "flag")
        default_policy = "block"
        per_sentence = True  # a word in an answer is in one of its sentences

        def check(self, batch, on):
            w = self.params.word.lower()
            return [[Finding(self.name, "word", 1.0, on="answer", reason=f"mentions {w!r}")]
                    if w in (s.answer or "").lower() else [] for s in batch]


_register_word_guard()


@pytest.fixture(scope="module")
def kb_served(tmp_path_factory) -> Path:
    return make_pipeline(tmp_path_factory.mktemp("serve"), keys=True)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """A real uvicorn server on 127.0.0.1:free port, in a thread of the test process."""

    def __init__(self, pipeline: Path, warm_first: bool = False, header_timeout_s: float = 10.0, tracer_provider=None,
                 http: str = "auto") -> None:
        import threading

        import uvicorn

        from ragcost.serve.app import build_app
        from ragcost.serve.protocol import protocol_class

        self.app = build_app(pipeline, warm_first=warm_first, tracer_provider=tracer_provider)
        self.port = free_port()
        base = protocol_class(http)  # what `ragcost serve` runs: httptools when installed
        http = type(base.__name__, (base,), {"header_timeout_s": header_timeout_s})
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    limit_concurrency=2000, backlog=2048, http=http))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def service(self):
        return self.app.state.service

    def __enter__(self) -> "ServerThread":
        import time

        import httpx

        self.thread.start()
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become ready")

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def ledger_rows(pipeline: Path):
    from ragcost.cost.ledger import Ledger
    from ragcost.runtime.pipeline import Pipeline

    led = Ledger(Pipeline.load(pipeline).config.store_url, read_only=True)
    try:
        return led.read()
    finally:
        led.close()
