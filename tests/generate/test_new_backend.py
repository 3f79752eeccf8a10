"""A new generate backend from this module alone: one class, one registration, then `ragcost query` uses it.

Nothing else is touched: the pipeline YAML names ``backend: shout``, the loader checks it
against the registry, and the stage builds it, streams it, prices it and cites from it.
"""

from __future__ import annotations

import json
from time import perf_counter

import pytest

from ragcost.generate import Attempt, BackendParams, Generator, Prompt, generator_registry
from ragcost.generate.attempt import USAGE_LOCAL
from ragcost.generate.base import OnText
from tests.cli.conftest import run_cli, write_corpus, write_pipeline
from ragcost.testing.generator import GeneratorContract


class Shout(Generator):
    """Answers with the titles of its sources in capitals, each cited; ``model: fail`` fails every request."""

    @classmethod
    def check(cls, params: BackendParams) -> None:
        if not params.model:
            raise ValueError("backend 'shout' needs model: (loud or fail)")

    async def generate(self, prompt: Prompt, attempt: Attempt, on_text: OnText) -> None:
        attempt.start = perf_counter()
        if self.params.model == "fail":
            attempt.error, attempt.end = "shout: hoarse", perf_counter()
            return
        for n, hit in enumerate(prompt.sources, 1):
            piece = f"{hit.title.upper()} [{n}]. "
            attempt.text += piece
            on_text(piece)
        attempt.prompt_tokens, attempt.output_tokens = len(prompt.user.split()), len(attempt.text.split())
        attempt.ok, attempt.usage_source, attempt.chunks, attempt.end = True, USAGE_LOCAL, len(prompt.sources), perf_counter()


@pytest.fixture(autouse=True)
def shout():
    generator_registry.register("shout")(Shout)  # what a plugin's module does at import
    yield
    generator_registry.unregister("shout")


class TestShout(GeneratorContract):
    invalid = [({"backend": "shout"}, "needs model")]

    @pytest.fixture
    def params(self) -> BackendParams:
        return BackendParams(backend="shout", model="loud")

    @pytest.fixture
    def failing_params(self) -> BackendParams:
        return BackendParams(backend="shout", model="fail")


def _kb(tmp_path, **gen):
    write_corpus(tmp_path / "kb.jsonl")
    return write_pipeline(tmp_path, stages=[{"type": "retrieve", "k": 3}, {"type": "generate", "backend": "shout", **gen}])


class TestQueryWithANewBackend:
    def test_ragcost_query_answers_through_it_and_prices_it(self, tmp_path, capsys):
        kb = _kb(tmp_path, model="loud")
        assert run_cli(capsys, "index", kb)[0] == 0
        code, out, err = run_cli(capsys, "query", kb, "how many days do I have to get a refund?", "--json")
        assert code == 0, err
        res = json.loads(out)
        [q] = res["queries"]
        assert q["error"] is None and q["answer"].startswith("REFUND POLICY [1].")
        assert q["citations"][0] == "kb-1" and len(q["citations"]) == 3
        assert res["generation"]["generate"]["attempts"] == 1
        assert "generate" in {s["stage"] for s in res["stages"]}

    def test_the_answer_streams_to_the_terminal(self, tmp_path, capsys):
        kb = _kb(tmp_path, model="loud")
        run_cli(capsys, "index", kb)
        code, out, err = run_cli(capsys, "query", kb, "how many days do I have to get a refund?")
        assert code == 0, err
        assert out.startswith("answer: REFUND POLICY [1].") and "citations: kb-1 (Refund policy)" in out

    def test_a_failing_request_falls_back_and_is_reported(self, tmp_path, capsys):
        kb = _kb(tmp_path, model="fail", retry={"attempts": 1}, fallback=[{"backend": "extractive"}])
        run_cli(capsys, "index", kb)
        code, out, err = run_cli(capsys, "query", kb, "how many days do I have to get a refund?", "--json")
        assert code == 0, err
        q = json.loads(out)["queries"][0]
        assert "30 days" in q["answer"] and q["notes"]["generation"]["errors"] == ["shout: hoarse"]

    def test_its_check_runs_at_load_with_the_file_position(self, tmp_path, capsys):
        kb = _kb(tmp_path)
        code, _, err = run_cli(capsys, "query", kb, "x")
        assert code != 0 and "needs model" in err and f"{kb}:" in err and len(err.strip().splitlines()) == 1

    def test_an_unknown_backend_lists_it_among_the_installed(self, tmp_path, capsys):
        kb = write_pipeline(tmp_path, stages=[{"type": "generate", "backend": "whisper"}])
        code, _, err = run_cli(capsys, "query", kb, "x")
        assert code != 0 and "unknown generate backend 'whisper'" in err and "shout" in err and "extractive" in err
