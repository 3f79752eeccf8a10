"""Answers that abstain: the wording, how a refusal is recognised, and the extractive backend's evidence.

An answer that says the sources hold no answer delivers nothing: the generate stage clears its
citations and notes ``abstained`` (``QueryState.generation``), and every useful-document judge
counts 0 for it. The extractive backend abstains when its evidence is weak: the best sentence
holds less than ``abstain_overlap`` of the question's content words, or the best source's score
(the last scoring stage's) is below ``abstain_score``. An LLM is told to answer :data:`NO_ANSWER`
in that case (the default system prompt), and a refusal in other words is recognised too.
"""

from __future__ import annotations

import re

NO_ANSWER = "The sources hold no answer to this question."
INSTRUCTION = f'If the passages do not contain the answer, reply exactly "{NO_ANSWER}" and cite nothing.'

_REFUSALS = re.compile(
    r"^\W*(the )?(provided )?(sources|passages|context|documents?)( provided)? (hold|holds|contain|contains|do not contain|does not contain|"
    r"don't contain|doesn't contain|have|has) no (answer|information)"
    r"|^\W*(the )?(provided )?(sources|passages|context|documents?)( provided)? (do not|does not|don't|doesn't) (contain|include|say|mention|provide)"
    r"|^\W*(i (cannot|can't|am unable to) (answer|find)|there is no (answer|information) (in|about))"
    r"|^\W*no passages were retrieved",
    re.IGNORECASE,
)


def is_refusal(text: str | None) -> bool:
    """Whether an answer says the sources do not answer the question (its first sentence does)."""
    return bool(text) and bool(_REFUSALS.search(text.strip()))
