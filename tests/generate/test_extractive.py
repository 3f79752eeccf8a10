"""The extractive backend keeps the generator contract; its sentence choice is tested through the stage."""

from __future__ import annotations

import pytest

from ragcost.generate import BackendParams
from ragcost.generate.extractive import Extractive, extract
from ragcost.generate.prompt import build_prompt
from ragcost.testing.generator import QUESTION, SOURCES, GeneratorContract, generate_batch


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


def test_the_title_line_the_chunker_put_before_a_window_is_no_sentence_and_not_repeated_in_the_prompt():
    from ragcost.generate.extractive import extract
    from ragcost.generate.prompt import Prompt
    from ragcost.records import Hit

    window = "return value to the target specified in the as clause. The with statement calls __exit__ at the end."
    hit = Hit(1, "context-managers", 0.9, "context-managers", f"context-managers\n{window}")  # title: every_chunk
    assert hit.passage == window
    assert Hit(2, "d", 0.5, "Flow", "Flow past a plate.").passage == "Flow past a plate."  # no title line: as stored
    text, _ = extract("how does the with statement call __exit__?", Prompt("s", "u", [hit]), sentences=2)
    assert "context-managers" not in text and "The with statement calls __exit__ at the end. [1]" in text
    prompt = build_prompt("q", [hit], BackendParams(backend="extractive"))
    assert prompt.user.count("context-managers") == 1 and "[1] context-managers\nreturn value" in prompt.user


def test_the_tail_of_a_sentence_that_an_overlapping_window_starts_inside_is_not_said_again():
    from ragcost.generate.extractive import extract
    from ragcost.generate.prompt import Prompt
    from ragcost.records import Hit

    whole = "The with statement binds the return value to the target in the as clause."
    hits = [Hit(1, "a", 0.9, "", f"Intro. {whole}"), Hit(2, "a", 0.8, "", "return value to the target in the as clause. More.")]
    text, used = extract("with statement return value target as clause", Prompt("s", "u", hits), sentences=2)
    assert text.count("return value to the target") == 1 and f"{whole} [1]" in text and used == [1]
