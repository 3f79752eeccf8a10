"""The no-LLM answer: the sentences of the top chunks that share most words with the question, cited (or none, abstaining)."""

from __future__ import annotations

import re
from time import perf_counter
from typing import Optional

from ragcost.generate.abstain import NO_ANSWER
from ragcost.generate.attempt import USAGE_LOCAL, Attempt
from ragcost.generate.base import Generator, OnText, generator_registry
from ragcost.generate.prompt import Prompt

SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
WORD = re.compile(r"[a-z0-9]+")
STOP = frozenset(
    "a an and are as at be by can do does for from how i in is it of on or so that the this to was what when where "
    "which who why will with you your".split()
)


def content_words(text: str) -> set[str]:
    """The words the evidence and the vocabulary count: lower-case, not stop words, longer than one letter."""
    return {w for w in WORD.findall(text.lower()) if w not in STOP and len(w) > 1}



def extract(question: str, prompt: Prompt, sentences: int, abstain_overlap: float = 0.0,
            abstain_score: Optional[float] = None) -> tuple[str, list[int]]:
    """The answer text (each sentence followed by its [n]) and the 1-based sources it used.

    A sentence scores by the question words it contains, with a small bonus for higher-ranked
    chunks so ties go to the better retrieval; the chosen sentences keep their reading order.
    The answer is :data:`NO_ANSWER` with no sources when the evidence is weak: the best source
    passage holds less than ``abstain_overlap`` of the question's content words (:func:`evidence`),
    or the best source's score is below ``abstain_score``.
    """
    q = content_words(question)
    if prompt.sources and abstain_score is not None:
        best = max((h.score for h in prompt.sources if h.score is not None), default=None)
        if best is None or best < abstain_score:
            return NO_ANSWER, []
    scored: list[tuple[float, int, int, str]] = []
    seen: set[str] = set()  # overlapping chunks repeat sentences: each is said once, from its best-ranked chunk
    order = 0
    edges: set[str] = set()  # a window's first and last sentence: where a window cuts a sentence in two
    for n, hit in enumerate(prompt.sources, 1):
        sents = SENTENCE.split(" ".join(hit.passage.split()))  # the chunk's title line is no sentence
        edges.update(x.strip() for x in (sents[0], sents[-1]))
        for sent in sents:
            sent = sent.strip()
            if len(sent) < 3 or sent in seen:
                continue
            seen.add(sent)
            overlap = len(q & content_words(sent))
            scored.append((overlap + 0.5 / n, order, n, sent))
            order += 1
    # an overlapping window that starts (or ends) inside a sentence holds a piece of it ("return value to the
    # target ..."): an edge sentence found whole inside another candidate is such a piece; only the whole is said
    texts = [t[3] for t in scored]
    scored = [t for t in scored if t[3] not in edges or not any(t[3] != o and t[3] in o for o in texts)]
    if not scored:
        return "No passages were retrieved, so there is nothing to answer from.", []
    if abstain_overlap > 0 and evidence(question, prompt) < abstain_overlap:
        return NO_ANSWER, []
    best = sorted(scored, key=lambda t: (-t[0], t[1]))[:sentences]
    best.sort(key=lambda t: t[1])
    used: list[int] = []
    for _, _, n, _ in best:
        if n not in used:
            used.append(n)
    return " ".join(f"{s} [{n}]" for _, _, n, s in best), used


def light_stem(w: str) -> str:
    """A light suffix strip, so "calls" meets "call" and "literals" "literal" (the evidence here, not the
    sentence choice; the hybrid re-rank's BM25 with ``stem: true``)."""
    for suf in ("ing", "ed", "es", "s"):
        if len(w) > 4 and w.endswith(suf):
            return w[: -len(suf)]
    return w


def evidence(question: str, prompt: Prompt) -> float:
    """The largest share of the question's content words (lightly stemmed) that one source passage holds.

    What :func:`extract` abstains on: an off-topic question finds few of its words together in any one
    passage. 0 when the question has no content words or nothing was retrieved.
    """
    q = {light_stem(w) for w in content_words(question)}
    if not q or not prompt.sources:
        return 0.0
    return max(len(q & {light_stem(w) for w in content_words(h.passage)}) for h in prompt.sources) / len(q)


@generator_registry.register("extractive")
class Extractive(Generator):
    """No LLM and no cost beyond CPU time: the best ``sentences`` of the prompt's sources, cited."""

    deterministic = True  # no sampling: temperature, top_p and seed cannot change the answer

    async def generate(self, prompt: Prompt, attempt: Attempt, on_text: OnText) -> None:
        attempt.start = perf_counter()
        p = self.params
        attempt.text, _ = extract(prompt.question, prompt, p.sentences, p.abstain_overlap, p.abstain_score)
        attempt.end = perf_counter()
        attempt.ok, attempt.usage_source, attempt.chunks = True, USAGE_LOCAL, 1
        on_text(attempt.text)
