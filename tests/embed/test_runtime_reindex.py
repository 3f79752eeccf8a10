"""Changing the embedding runtime changes the fingerprint: the old index is refused and `ragcost index` re-embeds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ragcost.cli.main import main
from ragcost.errors import FingerprintError
from ragcost.runtime.pipeline import Pipeline
from tests.embed.tiny_model import build_tiny_model

REPO = Path(__file__).resolve().parents[2]
DOCS = [("a", "Invoices are PDF files in the billing section."), ("b", "Reset your password from the login page."),
        ("c", "Webhooks send a signed POST request when an order changes.")]


def write(folder: Path, model: Path, embed: dict) -> Path:
    with (folder / "kb.jsonl").open("w", encoding="utf-8") as f:
        for i, text in DOCS:
            f.write(json.dumps({"id": i, "text": text}) + "\n")
    cfg = {"name": "kb", "store": f"duckdb:///{folder / 'kb.duckdb'}", "index_dir": str(folder / "index"),
           "source": str(folder / "kb.jsonl"), "chunking": {"size": 32, "overlap": 4},
           "embed": {"model": str(model), "batch_size": 4, "device": "cpu", **embed},
           "index": {"backend": "faiss", "kind": "flat"}, "pricing": str(REPO / "pricing" / "default.yaml"),
           "stages": [{"type": "retrieve", "k": 2}]}
    path = folder / "kb.yaml"
    path.write_text(json.dumps(cfg), encoding="utf-8")  # JSON is YAML
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGCOST_CACHE", str(tmp_path / "cache"))


def test_switching_to_onnx_refuses_the_old_index_and_reindexing_re_embeds(tmp_path, cache, capsys):
    pytest.importorskip("onnxruntime")
    model = build_tiny_model(tmp_path / "tiny")
    path = write(tmp_path, model, {})
    assert main(["index", str(path)]) == 0
    write(tmp_path, model, {"type": "onnx"})
    pipe = Pipeline.load(path)
    try:
        with pytest.raises(FingerprintError, match=r"model_fingerprint"):
            pipe.artifact()
    finally:
        pipe.close()
    capsys.readouterr()
    assert main(["index", str(path)]) == 0
    out = capsys.readouterr().out
    assert "every document was re-embedded" in out and "model" in out
    assert os.listdir(tmp_path / "cache" / "onnx")  # the export was made, not a fallback to torch
