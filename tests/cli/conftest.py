"""A tiny real corpus and pipeline in a temp folder, indexed with the packaged MiniLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragcost.cli.main import main

REPO = Path(__file__).resolve().parents[2]

DOCS = [
    ("kb-1", "Refund policy", "Customers can ask for a refund within 30 days of purchase by writing to billing.", "acme", 2023, ["billing", "refunds"]),
    ("kb-2", "Password reset", "To reset a password open the login page and follow the forgotten password link.", "acme", 2024, ["account"]),
    ("kb-3", "Invoice download", "Invoices are available as PDF files in the billing section of the dashboard.", "acme", 2024, ["billing"]),
    ("kb-4", "Two-factor login", "Enable two-factor authentication under security settings with an authenticator app.", "globex", 2022, ["account", "security"]),
    ("kb-5", "API rate limits", "The public API allows 100 requests per minute per key; bursts above that return 429.", "globex", 2024, ["api"]),
    ("kb-6", "Data export", "Export all records as CSV from the settings page; large exports arrive by e-mail.", "initech", 2023, ["data"]),
    ("kb-7", "Cancel subscription", "Cancel a subscription at any time; billing stops at the end of the current period.", "initech", 2024, ["billing"]),
    ("kb-8", "Webhooks", "Webhooks send a signed POST request to your endpoint whenever an order changes state.", "globex", 2023, ["api"]),
    ("kb-9", "Team members", "Invite team members from the organisation page and assign each a role.", "acme", 2022, ["account"]),
    ("kb-10", "Status page", "Outages and maintenance windows are announced on the public status page.", "initech", 2022, []),
    ("kb-11", "O'Brien; DROP TABLE docs", "A document whose title holds quotes and SQL keywords, to test filters.", "o'hara \"inc\"", 2021, ["edge"]),
    ("kb-12", "Ünïcödé guide", "Documentation written in several languages: café, naïve, 東京.", "zürich", 2021, ["edge"]),
]


def write_corpus(path: Path, docs=DOCS) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i, title, text, tenant, year, tags in docs:
            f.write(json.dumps({"id": i, "title": title, "text": text, "tenant": tenant, "year": year, "tags": tags}) + "\n")
    return path


def write_pipeline(folder: Path, **overrides) -> Path:
    cfg = {
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
    p = folder / "kb.yaml"
    p.write_text(json.dumps(cfg, indent=2), encoding="utf-8")  # JSON is YAML
    return p


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    write_corpus(tmp_path / "kb.jsonl")
    return write_pipeline(tmp_path)
