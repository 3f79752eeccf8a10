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
