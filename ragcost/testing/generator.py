"""The contract every generate backend keeps; a backend's test class inherits it.

Give the class a ``params`` fixture (the ``BackendParams`` of a working backend) and, when the
backend can fail, a ``failing_params`` fixture (params whose request fails: a closed port, an
engine that raises). ``invalid`` lists params the backend's ``check`` must refuse, with the text
the error must contain. Then every test below runs against it::

    class TestMine(GeneratorContract):
        invalid = [({"backend": "mine"}, "model")]

        @pytest.fixture
        def params(self):
            return BackendParams(backend="mine", model="m")
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, ClassVar, Optional

import pytest
from pydantic import ValidationError

from ragcost.generate import Attempt, BackendParams, Generator, Prompt, generator_registry
from ragcost.generate.attempt import USAGE_NONE
from ragcost.generate.prompt import build_prompt, cited
from ragcost.records import Hit, QueryState, UsageRecord

QUESTION = "how long do I have to get a refund?"
SOURCES = [
    Hit(1, "kb-1", 0.9, "Refund policy", "Customers can ask for a refund within 30 days. Write to billing to start it."),
    Hit(2, "kb-7", 0.7, "Cancel subscription", "Cancel at any time. Billing stops at the end of the current period."),
]

BOOK = """\
version: "contract.1"
as_of: 2026-12-01
queries_per_month: 1000
resources:
  cpu: {kind: time, usd_per_hour: 0.36, source: test}
"""


def generate_batch(gen: Generator, prompts: list[Prompt], concurrency: Optional[int] = None) -> list[tuple[Attempt, list[str]]]:
    """One batch as the stage runs it: open, the prompts concurrently, aclose. Each attempt with its streamed pieces."""

    async def one(prompt: Prompt) -> tuple[Attempt, list[str]]:
        att, pieces = Attempt(backend=gen.params.backend_name, resource="contract"), []
        await gen.generate(prompt, att, pieces.append)
        return att, pieces

    async def batch() -> list[tuple[Attempt, list[str]]]:
        await gen.open(concurrency or len(prompts), 0.0)
        try:
            return list(await asyncio.gather(*(one(p) for p in prompts)))
        finally:
            await gen.aclose()

    return asyncio.run(batch())


class GeneratorContract:
    """Tests every registered generator must pass."""

    invalid: ClassVar[list[tuple[dict[str, Any], str]]] = []  # (params, text the error names)

    @pytest.fixture
    def params(self) -> BackendParams:
        raise NotImplementedError("a generator's test class gives a `params` fixture")

    @pytest.fixture
    def failing_params(self) -> Optional[BackendParams]:
        return None  # the backend cannot fail (extractive)

    @pytest.fixture
    def generator(self, params: BackendParams) -> Generator:
        gen = generator_registry.get(params.backend)(params)
        gen.warm_up()
        return gen

    @pytest.fixture
    def prompt(self, params: BackendParams) -> Prompt:
        return build_prompt(QUESTION, SOURCES, params)

    def test_is_the_class_registered_under_its_backend_name(self, params, generator):
        assert isinstance(generator, Generator) and type(generator) is generator_registry.get(params.backend)

    def test_its_params_survive_a_dump_and_load(self, params):
        assert BackendParams.model_validate(params.model_dump()) == params

    def test_check_refuses_what_the_backend_cannot_run_with(self):
        for bad, names in self.invalid:
            with pytest.raises(ValidationError, match=names):
                BackendParams(**bad)

    def test_answers_a_prompt_with_sources_with_ok_text(self, generator, prompt):
        [(att, _)] = generate_batch(generator, [prompt])
        assert att.ok and att.error is None, att.error
        assert att.text.strip()
        assert 0 < att.start <= att.end

    def test_streamed_text_arrives_through_on_text_in_order(self, generator, prompt):
        [(att, pieces)] = generate_batch(generator, [prompt])
        assert pieces and "".join(pieces) == att.text

    def test_says_where_its_token_counts_came_from(self, generator, prompt):
        [(att, _)] = generate_batch(generator, [prompt])
        assert att.usage_source != USAGE_NONE
        for count in (att.prompt_tokens, att.cached_tokens, att.output_tokens):
            assert count is None or count >= 0

    def test_its_citations_parse_back_to_the_sources(self, generator, prompt):
        [(att, _)] = generate_batch(generator, [prompt])
        ids = cited(att.text, prompt.sources)
        assert ids and set(ids) <= {h.doc_id for h in SOURCES}

    def test_a_failure_is_recorded_in_the_attempt_never_raised(self, failing_params, prompt):
        if failing_params is None:
            pytest.skip("this backend has no way to fail")
        gen = generator_registry.get(failing_params.backend)(failing_params)
        gen.warm_up()
        [(att, pieces)] = generate_batch(gen, [prompt])
        assert not att.ok and att.error and isinstance(att.retryable, bool)
        assert att.start <= att.end and "".join(pieces) == att.text

    def test_serves_concurrent_requests_and_batch_after_batch(self, generator, params):
        prompts = [build_prompt(f"{QUESTION} ({i})", SOURCES, params) for i in range(3)]
        for _ in range(2):  # open, generate, aclose; and again
            results = generate_batch(generator, prompts, concurrency=2)
            assert [a.ok for a, _ in results] == [True] * 3, [a.error for a, _ in results]

    def test_runs_in_the_generate_stage_with_one_priced_record_per_attempt(self, params, tmp_path):
        from ragcost.cost.pricebook import load_price_book
        from ragcost.stages.generate import Generate

        (tmp_path / "book.yaml").write_text(BOOK)
        ctx = SimpleNamespace(resource="cpu", price_book=load_price_book(tmp_path / "book.yaml"), path=tmp_path / "p.yaml", base=tmp_path)
        stage = Generate(Generate.Params(**{**params.model_dump(), "resource": "cpu"}), ctx)
        stage.warm_up()
        streamed: dict[str, list[str]] = {}
        stage.on_event = lambda s, kind, text: streamed.setdefault(s.id, []).append(text) if kind == "text" else None
        batch = [QueryState(text=QUESTION, id=f"q{i}", hits=list(SOURCES)) for i in range(2)]
        stage.run(batch, UsageRecord(stage=stage.name, resource="cpu", items=2))
        periods: dict[str, list[UsageRecord]] = {}
        for s in batch:
            assert s.error is None and s.answer and "".join(streamed[s.id]) == s.answer and s.citations
            [rec, overhead] = s.usage  # its attempt, then its share of the stage's time outside attempts
            assert rec.resource == "cpu" and rec.failures == 0 and rec.notes["usage"] != USAGE_NONE
            assert overhead.stage == f"{stage.name}/overhead" and overhead.busy_share == 0.5
            periods.setdefault(rec.call_id, []).append(rec)
        for recs in periods.values():  # attempts of one busy period split it by duration, paying it once
            assert all(r.shared_by == len(recs) for r in recs) and sum(r.busy_share for r in recs) == pytest.approx(1)
