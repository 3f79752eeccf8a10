"""The extractive backend keeps the generator contract; its sentence choice is tested through the stage."""

from __future__ import annotations

import pytest

from ragcost.generate import BackendParams
from ragcost.generate.extractive import Extractive, extract
from ragcost.generate.prompt import build_prompt
from tests.contracts.generator import QUESTION, SOURCES, GeneratorContract, generate_batch


class TestExtractive(GeneratorContract):
    @pytest.fixture
    def params(self) -> BackendParams:
        return BackendParams(backend="extractive", sentences=2)

    def test_answers_from_the_question_it_was_asked_not_the_template(self, generator, params):
        prompt = build_prompt(QUESTION, SOURCES, params)
        [(att, _)] = generate_batch(generator, [prompt])
        assert att.text == extract(QUESTION, prompt, 2)[0] and "30 days" in att.text

    def test_needs_no_model_and_labels_itself_by_name(self):
        assert BackendParams().backend_name == "extractive" and isinstance(Extractive(BackendParams()), Extractive)


def test_a_sentence_two_overlapping_chunks_share_is_said_once():
    from ragcost.generate.extractive import extract
    from ragcost.generate.prompt import Prompt
    from ragcost.records import Hit

    shared = "The with statement calls __exit__ when the block ends."
    hits = [Hit(1, "with", 0.9, "with", f"Intro text here. {shared}"), Hit(2, "with", 0.8, "with", f"{shared} More text follows.")]
    text, used = extract("how does the with statement call __exit__?", Prompt("s", "u", hits), sentences=3)
    assert text.count(shared) == 1 and used[0] == 1
