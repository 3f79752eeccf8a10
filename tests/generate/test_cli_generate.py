"""`ragcost query` with the default extractive generator: answer, citations, TTFT line, JSON fields, ledger."""

from __future__ import annotations

import json

from tests.cli.conftest import run_cli, write_corpus, write_pipeline


def _kb(tmp_path, **gen):
    write_corpus(tmp_path / "kb.jsonl")
    return write_pipeline(tmp_path, stages=[{"type": "retrieve", "k": 3}, {"type": "generate", **gen}])


class TestQueryWithGenerate:
    def test_the_answer_streams_then_citations_and_the_generation_line(self, tmp_path, capsys):
        kb = _kb(tmp_path)
        assert run_cli(capsys, "index", kb)[0] == 0
        code, out, err = run_cli(capsys, "query", kb, "how many days do I have to get a refund?")
        assert code == 0, err
        assert out.startswith("answer: ") and "30 days" in out.splitlines()[0] and "[1]" in out.splitlines()[0]
        assert "citations: kb-1 (Refund policy)" in out
        assert "generate: TTFT p50" in out and "attempts 1 (0 failed)" in out
        assert "generate" in out and "retrieve" in out and "total" in out  # the stage table is still there

    def test_json_keeps_its_shape_and_adds_answer_citations_and_generation(self, tmp_path, capsys):
        kb = _kb(tmp_path, sentences=1)
        run_cli(capsys, "index", kb)
        code, out, err = run_cli(capsys, "query", kb, "how many days do I have to get a refund?", "--json")
        assert code == 0, err
        res = json.loads(out)
        q = res["queries"][0]
        assert {"id", "text", "strategy", "hits", "notes"} <= set(q) and q["error"] is None
        assert q["citations"] == ["kb-1"] and q["answer"].endswith("[1]")
        assert res["generation"]["generate"]["attempts"] == 1
        assert {s["stage"] for s in res["stages"]} >= {"embed", "retrieve", "generate"}

    def test_an_unknown_backend_is_a_one_line_error_with_the_known_ones(self, tmp_path, capsys):
        kb = _kb(tmp_path, backend="gpt")
        code, _, err = run_cli(capsys, "query", kb, "x")
        assert code != 0 and "backend" in err and "extractive" in err
