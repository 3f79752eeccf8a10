"""The README's first command: the quickstart pipeline runs the whole chain and counts useful documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragcost.cli.main import main
from ragcost.runtime.load import load_pipeline

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "pipelines" / "quickstart.yaml"
CHAIN = ["guard:query", "retrieve", "rerank:hybrid", "generate", "generate/overhead", "guard:answer"]


def test_the_quickstart_chains_guard_retrieve_rerank_generate_and_an_answer_guard():
    lp = load_pipeline(QUICKSTART)
    names = [(cls.type, getattr(p, "on", None), getattr(p, "backend", None)) for cls, p in lp.stage_specs]
    assert names == [("guard", "query", None), ("retrieve", None, None), ("rerank", None, "hybrid"),
                     ("generate", None, "extractive"), ("guard", "answer", None)]
    checks = [p.checks for cls, p in lp.stage_specs if cls.type == "guard"]
    assert checks[0] == ["pii", "prompt_injection"] and checks[1][0]["check"] == "grounded"
    assert lp.config.useful.judge == "cited"


def _copy(tmp_path: Path) -> Path:
    """The quickstart with its store and index in tmp_path (the rest as committed)."""
    from tests.conftest import quickstart_copy

    return quickstart_copy(tmp_path)


@pytest.mark.slow  # embeds the 79 pydoc topics (~860 chunks): minutes on a shared 2-core machine
def test_the_readme_query_runs_every_stage_and_reports_useful_documents(quickstart_built, quickstart_index, capsys):
    code, _, err, _ = quickstart_built  # `ragcost index pipelines/quickstart.yaml`, run once per session
    assert code == 0, err
    pipe = quickstart_index()
    assert main(["query", str(pipe), "how does the with statement call __exit__?", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    q = res["queries"][0]
    assert q["error"] is None and q["answer"] and q["citations"]
    assert any(h["title"] in ("with", "context-managers", "compound") for h in q["hits"])
    stages = {s["stage"]: s for s in res["stages"]}
    overhead = stages.pop("overhead")  # CPU outside stage calls (issue 24): priced, no call of its own
    assert overhead["calls"] == 0 and overhead["usd"] >= 0
    assert list(stages) == ["embed", *CHAIN]
    for s in stages.values():
        assert s["calls"] >= 1 and s["usd"] > 0 and s["useful"] == res["useful"]
        assert s["usd_per_useful"] == pytest.approx(s["usd"] / s["useful"])
    # cited and supported by the grounded check: at most the cited documents, and this answer is supported
    assert 0 < res["useful"] == q["useful"] <= len(set(q["citations"]))
    assert res["usd_per_useful"] == pytest.approx(res["total_usd"] / res["useful"])
