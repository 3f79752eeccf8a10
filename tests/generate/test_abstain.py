"""Answers that abstain: the extractive backend's weak-evidence rule, refusals recognised, nothing counted useful."""

from __future__ import annotations

import pytest

from ragcost.generate.abstain import NO_ANSWER, is_refusal
from ragcost.generate.extractive import evidence, extract
from ragcost.generate.params import DEFAULT_SYSTEM
from ragcost.generate.prompt import Prompt
from ragcost.records import Hit, QueryState

HITS = [Hit(1, "with", 0.4, "with", "The with statement calls __exit__ when the block ends. It also calls __enter__."),
        Hit(2, "lambda", 0.3, "lambda", "A lambda expression makes an anonymous function.")]


def test_an_off_topic_question_gets_the_no_answer_sentence_and_no_sources():
    text, used = extract("What is the capital of France?", Prompt("s", "u", HITS), 3, abstain_overlap=0.5)
    assert text == NO_ANSWER and used == []


def test_an_on_topic_question_is_answered_and_cited():
    text, used = extract("How does the with statement call __exit__?", Prompt("s", "u", HITS), 1, abstain_overlap=0.5)
    assert text.endswith("[1]") and used == [1]
    # {statement, exit, call} all in the first passage ("calls" stems to "call")
    assert evidence("How does the with statement call __exit__?", Prompt("s", "u", HITS)) == pytest.approx(1.0)
    assert evidence("How does a lambda call exit?", Prompt("s", "u", HITS)) == pytest.approx(2 / 3)


def test_generic_words_can_make_it_abstain_on_an_answerable_question():
    # a known limit of a word-overlap rule: "long", "have", "get" are not in the refund passage
    refund = [Hit(1, "kb-1", 0.9, "Refund policy", "Customers can ask for a refund within 30 days.")]
    assert extract("how long do I have to get a refund?", Prompt("s", "u", refund), 1, abstain_overlap=0.34)[0] == NO_ANSWER


def test_a_score_level_abstains_on_weak_retrieval_and_zero_turns_overlap_off():
    q = "How does the with statement call __exit__?"
    assert extract(q, Prompt("s", "u", HITS), 3, abstain_score=0.5)[0] == NO_ANSWER
    assert extract("capital of France?", Prompt("s", "u", HITS), 3, abstain_overlap=0.0)[0] != NO_ANSWER


@pytest.mark.parametrize("text, refused", [
    (NO_ANSWER, True), ("The passages do not contain the answer to this question.", True),
    ("I cannot answer that from the sources.", True), ("The provided context does not mention France.", True),
    ("The with statement calls __exit__ [1].", False), ("Sources say lambda makes functions [2].", False),
])
def test_a_refusal_is_recognised_in_other_words_too(text, refused):
    assert is_refusal(text) is refused


def test_the_default_llm_prompt_carries_the_instruction():
    assert NO_ANSWER in DEFAULT_SYSTEM and "cite nothing" in DEFAULT_SYSTEM


def test_an_abstaining_query_counts_no_useful_document_whatever_it_retrieved():
    from types import SimpleNamespace

    from ragcost.config.pipeline import UsefulConfig
    from ragcost.runtime.judge import useful_count

    pipe = SimpleNamespace(config=SimpleNamespace(useful=UsefulConfig(judge="cited")), loaded=SimpleNamespace(stage_specs=[]))
    s = QueryState("q", hits=list(HITS), answer="It calls __exit__. [1]", citations=["with"])
    assert useful_count(pipe, s) == 1
    s.generation = {"abstained": True}
    assert useful_count(pipe, s) == 0
