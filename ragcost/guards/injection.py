"""Prompt-injection heuristics for the query and the retrieved chunks, scored, with the matched span.

Signals: instructions to ignore or forget earlier instructions, role switches ("you are now",
"system:" at a line start, chat-template tokens), requests to reveal the system prompt, and
hidden text (zero-width or tag characters, HTML comments, CSS that hides text or paints it white).
Instruction phrases are matched with invisible characters removed, so "ig\u200bnore" still counts;
spans point into the original text. The score is the strongest signal, raised a little by each
further one (1 - prod(1 - w)).
"""

from __future__ import annotations

import re

from pydantic import Field

from ragcost.guards.base import Finding, GuardParams, TextGuard, guard_registry

_INVISIBLE = re.compile("[\u200b-\u200f\u2060-\u2064\ufeff\u00ad\u180e\U000e0000-\U000e007f]")

_IGNORE = (r"(?:ignore|disregard|forget|override|skip|bypass)\s+(?:all\s+|any\s+|every\s+|the\s+|your\s+|of\s+)*"
           r"(?:previous|prior|above|earlier|preceding|former|original|system|initial)\s+"
           r"(?:instructions?|prompts?|rules|directions|guidelines|context|messages?|commands?)")
_ROLE_NOUN = r"(?:assistant|ai|bot|chatbot|model|mode|persona|character|dan|jailbroken|unrestricted|unfiltered|uncensored|developer|admin|root)"

# (kind, weight, pattern) -- matched case-insensitively on the text without invisible characters.
PHRASES: list[tuple[str, float, re.Pattern]] = [
    ("ignore_instructions", 0.95, re.compile(_IGNORE, re.I)),
    ("ignore_instructions", 0.9, re.compile(r"(?:ignore|ignora|ignorar|ignorez|ignoriere)\s+(?:todas?\s+)?(?:as\s+|las\s+|les\s+|alle\s+)?"
                                            r"(?:instruções|instrucciones|instructions|anweisungen)\s+(?:anteriores|précédentes|vorherigen)", re.I)),
    ("new_instructions", 0.7, re.compile(r"\b(?:new|updated|real|actual)\s+(?:system\s+)?instructions?\s*:", re.I)),
    ("role_switch", 0.75, re.compile(r"\byou\s+are\s+(?:now|no\s+longer)\s+(?:a\s+|an\s+|the\s+|in\s+)?(?:\w+[\s-]+){0,3}?" + _ROLE_NOUN + r"\b", re.I)),
    ("role_switch", 0.65, re.compile(r"\bfrom\s+now\s+on,?\s+you\s+(?:are|will|must|shall|should)\b", re.I)),
    ("role_switch", 0.6, re.compile(r"\b(?:act|behave|respond)\s+as\s+(?:if\s+you\s+(?:are|were)\s+)?(?:a\s+|an\s+)?(?:\w+\s+){0,3}?"
                                    r"(?:without|with\s+no)\s+(?:any\s+)?(?:restrictions|filters|rules|limits|guidelines)", re.I)),
    ("role_switch", 0.6, re.compile(r"\bpretend\s+(?:to\s+be|you\s+are)\b", re.I)),
    ("role_marker", 0.7, re.compile(r"(?:^|\n)\s*(?:#{1,3}\s*)?(?:system|assistant|developer)\s*:", re.I)),
    ("role_marker", 0.8, re.compile(r"<\|im_start\|>|<\|system\|>|<<SYS>>|\[INST\]|<\|start_header_id\|>", re.I)),
    ("prompt_leak", 0.8, re.compile(r"\b(?:reveal|print|show|repeat|output|leak|tell\s+me)\s+(?:me\s+)?(?:your|the)\s+(?:\w+\s+)?"
                                    r"(?:system\s+prompt|hidden\s+prompt|initial\s+prompt|instructions|prompt)\b", re.I)),
    ("conceal", 0.6, re.compile(r"\bdo\s+not\s+(?:tell|inform|mention\s+(?:this\s+)?to|reveal\s+(?:this\s+)?to)\s+the\s+user\b", re.I)),
]

# Hidden-text carriers, matched on the original text.
HIDDEN: list[tuple[str, float, re.Pattern]] = [
    ("html_comment", 0.4, re.compile(r"<!--.*?-->", re.S)),
    ("hidden_css", 0.6, re.compile(r"(?:display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*0(?:px|pt|em)?\s*[;\"']|opacity\s*:\s*0(?:\.0+)?\s*[;\"']"
                                   r"|color\s*:\s*(?:white|#fff(?:fff)?)\b[^>]*background(?:-color)?\s*:\s*(?:white|#fff(?:fff)?)\b"
                                   r"|background(?:-color)?\s*:\s*(?:white|#fff(?:fff)?)\b[^>]*\bcolor\s*:\s*(?:white|#fff(?:fff)?)\b"
                                   r"|(?<![-\w])color\s*:\s*(?:white|#fff(?:fff)?)\b)", re.I)),
]
INVISIBLE_WEIGHT = 0.5


def _strip_invisible(text: str) -> tuple[str, list[int]]:
    """The text without invisible characters, and for each kept character its index in ``text``."""
    kept, index = [], []
    for i, ch in enumerate(text):
        if not _INVISIBLE.match(ch):
            kept.append(ch)
            index.append(i)
    return "".join(kept), index


def find_injection(text: str) -> list[Finding]:
    """Every signal in ``text``; ``score`` of each is its weight."""
    found: list[Finding] = []
    clean, index = _strip_invisible(text)
    for kind, w, pat in PHRASES:
        for m in pat.finditer(clean):
            if m.end() == m.start():
                continue
            a, b = index[m.start()], index[m.end() - 1] + 1
            found.append(Finding("prompt_injection", kind, w, span=(a, b), match=text[a:b][:200], reason=f"{kind}: {text[a:b][:80]!r}"))
    for kind, w, pat in HIDDEN:
        for m in pat.finditer(text):
            found.append(Finding("prompt_injection", kind, w, span=m.span(), match=m.group()[:200], reason=f"{kind}: {m.group()[:80]!r}"))
    inv = [m.start() for m in _INVISIBLE.finditer(text)]
    if inv:
        found.append(Finding("prompt_injection", "invisible_chars", INVISIBLE_WEIGHT, span=(inv[0], inv[-1] + 1),
                             reason=f"{len(inv)} invisible character(s)"))
    return found


def injection_score(findings: list[Finding]) -> float:
    p = 1.0
    for f in findings:
        p *= 1.0 - f.score
    return 1.0 - p


class InjectionParams(GuardParams):
    threshold: float = Field(0.5, ge=0, le=1, description="report a text whose combined score is at or above this")


@guard_registry.register("prompt_injection")
class PromptInjectionGuard(TextGuard):
    """Heuristic prompt-injection detector; on context, ``drop`` removes the flagged chunk."""

    name = "prompt_injection"
    Params = InjectionParams
    policies = ("block", "drop", "flag")
    default_policy = "block"

    def scan(self, text: str) -> list[Finding]:
        signals = find_injection(text)
        score = injection_score(signals)
        if score < self.params.threshold:
            return []
        top = max(signals, key=lambda f: f.score)
        # One finding per text: the strongest signal's span, the combined score, every kind seen.
        kinds = sorted({f.kind for f in signals})
        return [Finding(self.name, top.kind, score, span=top.span, match=top.match, reason=f"{', '.join(kinds)} (score {score:.2f}); {top.reason}")]


def is_injection(text: str, threshold: float = 0.5) -> bool:
    return injection_score(find_injection(text)) >= threshold
