"""Fixtures for the bad-input catalogue: a tiny corpus, indexed once per session, copied per probe.

Each probe gets a fresh folder (its working directory too) holding ``kb.yaml`` and ``kb.jsonl``;
``Workspace.indexed("clean"|"hostile")`` copies a prebuilt store and index into it, so a probe
never pays for embedding the corpus again.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ragcost.cli.main import main

REPO = Path(__file__).resolve().parents[2]

DOCS = [
    {"id": "kb-1", "title": "Refund policy", "text": "Customers can ask for a refund within 30 days of purchase by writing to billing.", "tenant": "acme", "year": 2023, "tags": ["billing"]},
    {"id": "kb-2", "title": "Password reset", "text": "To reset a password open the login page and follow the forgotten password link.", "tenant": "acme", "year": 2024, "tags": ["account"]},
    {"id": "kb-3", "title": "Invoice download", "text": "Invoices are available as PDF files in the billing section of the dashboard.", "tenant": "globex", "year": 2024, "tags": ["billing"]},
    {"id": "kb-4", "title": "API rate limits", "text": "The public API allows 100 requests per minute per key; bursts above that return 429.", "tenant": "globex", "year": 2022, "tags": ["api"]},
    {"id": "kb-5", "title": "Data export", "text": "Export all records as CSV from the settings page; large exports arrive by e-mail.", "tenant": "initech", "year": 2023, "tags": ["data"]},
]

# Documents whose text would be markup or terminal control if printed as is.
HOSTILE = DOCS[:2] + [
    {"id": "m-1", "title": "[/]", "text": "Closing tag [/] and [bold]bold[/bold] about refunds and money back.", "tenant": "x", "year": 2020, "tags": []},
    {"id": "m-2", "title": "Link doc", "text": "Refund [link=https://evil.example]click here[/link] for your money back.", "tenant": "x", "year": 2020, "tags": []},
    {"id": "m-3", "title": "Escape doc", "text": "Refund \x1b[2J\x1b]0;pwned\x07 money back \x9b31m now\x07 bell.", "tenant": "x", "year": 2020, "tags": []},
]


def write_corpus(path: Path, docs: list[dict] = DOCS) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


def pipeline_config(folder: Path, **overrides: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "name": "kb",
        "store": f"duckdb:///{folder / 'kb.duckdb'}",
        "index_dir": str(folder / "index"),
        "metadata": {"tenant": "str", "year": "int", "tags": "list[str]"},
        "source": str(folder / "kb.jsonl"),
        "chunking": {"size": 64, "overlap": 8},
        "embed": {"model": "all-MiniLM-L6-v2", "batch_size": 16},
        "index": {"backend": "hnswlib", "kind": "hnsw", "build": {"M": 8, "ef_construction": 64}, "search": {"ef": 32}},
        "pricing": str(REPO / "pricing" / "default.yaml"),
        "stages": [{"type": "retrieve", "k": 3}],
    }
    cfg.update(overrides)
    return cfg


def write_pipeline(folder: Path, **overrides: Any) -> Path:
    p = folder / "kb.yaml"
    p.write_text(json.dumps(pipeline_config(folder, **overrides), indent=2), encoding="utf-8")  # JSON is YAML
    return p


@dataclass
class Workspace:
    """A probe's folder (also its working directory), with the prebuilt indexes to copy in."""

    dir: Path
    prebuilt: dict[str, Path]
    monkeypatch: pytest.MonkeyPatch

    @property
    def kb(self) -> Path:
        return self.dir / "kb.yaml"

    def write(self, name: str, content: str | bytes) -> Path:
        p = self.dir / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
        return p

    def pipeline(self, **overrides: Any) -> Path:
        return write_pipeline(self.dir, **overrides)

    def indexed(self, which: str = "clean") -> Path:
        """Copy the prebuilt store and index of ``which`` corpus here; the pipeline points at the copies."""
        src = self.prebuilt[which]
        shutil.copy2(src / "kb.duckdb", self.dir / "kb.duckdb")
        shutil.rmtree(self.dir / "index", ignore_errors=True)
        shutil.copytree(src / "index", self.dir / "index")
        shutil.copy2(src / "kb.jsonl", self.dir / "kb.jsonl")
        return write_pipeline(self.dir)


def _build(folder: Path, docs: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_corpus(folder / "kb.jsonl", docs)
    code = main(["index", str(write_pipeline(folder))])
    assert code == 0, f"building the {folder.name} fixture index failed"
    return folder


@pytest.fixture(scope="session")
def prebuilt(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("prebuilt")
    return {"clean": _build(base / "clean", DOCS), "hostile": _build(base / "hostile", HOSTILE)}


@pytest.fixture
def workspace(tmp_path, monkeypatch, prebuilt) -> Workspace:
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)
    monkeypatch.setenv("COLUMNS", "400")  # wide tables: a printed value is never wrapped across lines
    write_corpus(ws / "kb.jsonl")
    write_pipeline(ws)
    return Workspace(ws, prebuilt, monkeypatch)
