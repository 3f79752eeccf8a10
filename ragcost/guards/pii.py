"""Detect and redact personal data: e-mails, phones, payment cards (Luhn), IBANs (mod-97), IPv4/IPv6,
Brazilian CPF and CNPJ (check digits).

Patterns find candidates; a checksum or a parser confirms them wherever the format has one, so an
invalid card, IBAN, CPF or CNPJ is not reported. Overlaps go to the most specific kind
(IBAN > card > CNPJ > CPF > e-mail > IP > phone). Presidio's pattern recognizers were the other
choice; they import spaCy at load and tldextract fetches a suffix list, so this small, offline
module is used instead.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Callable, Optional

from pydantic import Field, field_validator

from ragcost.guards.base import Finding, GuardParams, TextGuard, guard_registry

KINDS = ("iban", "credit_card", "cnpj", "cpf", "email", "ip_address", "phone")


@dataclass(frozen=True)
class Span:
    kind: str
    start: int
    end: int


def _digits(s: str) -> str:
    return "".join(c for c in s if c.isdigit())


def luhn_ok(number: str) -> bool:
    d = [int(c) for c in _digits(number)]
    if not d:
        return False
    total = 0
    for i, x in enumerate(reversed(d)):
        if i % 2:
            x = x * 2 - 9 if x > 4 else x * 2
        total += x
    return total % 10 == 0


# Issuer prefixes and lengths (Visa, Mastercard, Amex, Discover, Diners, JCB, Elo/Hipercard via Luhn+length).
_CARD_PREFIX = re.compile(r"^(4\d{12}(\d{3}){0,2}|5[1-5]\d{14}|2(2[2-9]|[3-6]\d|7[01])\d{12}|2720\d{12}|3[47]\d{13}|"
                          r"6(011|5\d\d|4[4-9]\d)\d{12,15}|3(0[0-5]|[68]\d)\d{11,16}|35\d{14,17}|"
                          r"(636368|438935|504175|451416|636297|5067\d\d|4576\d\d|4011\d\d|606282|3841\d\d)\d{10})$")


def card_ok(number: str) -> bool:
    d = _digits(number)
    return 13 <= len(d) <= 19 and bool(_CARD_PREFIX.match(d)) and luhn_ok(d)


# IBAN lengths of the countries most often seen; others are accepted at 15-34 characters.
_IBAN_LEN = {
    "AD": 24, "AT": 20, "BE": 16, "BR": 29, "CH": 21, "CZ": 24, "DE": 22, "DK": 18, "ES": 24, "FI": 18,
    "FR": 27, "GB": 22, "GR": 27, "HR": 21, "HU": 28, "IE": 22, "IT": 27, "LU": 20, "NL": 18, "NO": 15,
    "PL": 28, "PT": 25, "RO": 24, "SE": 24, "SI": 19, "SK": 24, "TR": 26,
}


def iban_ok(iban: str) -> bool:
    s = re.sub(r"[\s-]", "", iban).upper()
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", s):
        return False
    want = _IBAN_LEN.get(s[:2])
    if (want is not None and len(s) != want) or not 15 <= len(s) <= 34:
        return False
    moved = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _check_digit(digits: list[int], weights: list[int]) -> int:
    r = sum(d * w for d, w in zip(digits, weights)) % 11
    return 0 if r < 2 else 11 - r


def cpf_ok(cpf: str) -> bool:
    d = [int(c) for c in _digits(cpf)]
    if len(d) != 11 or len(set(d)) == 1:
        return False
    return _check_digit(d[:9], list(range(10, 1, -1))) == d[9] and _check_digit(d[:10], list(range(11, 1, -1))) == d[10]


def cnpj_ok(cnpj: str) -> bool:
    d = [int(c) for c in _digits(cnpj)]
    if len(d) != 14 or len(set(d)) == 1:
        return False
    w1 = [5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2]
    return _check_digit(d[:12], w1) == d[12] and _check_digit(d[:13], [6] + w1) == d[13]


def ipv6_ok(s: str) -> bool:
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    return sum(c.isalnum() for c in s) >= 1  # "::" alone is not an address anyone writes down


_DATE_OR_QUAD = re.compile(r"^\d{1,4}([./-])\d{1,2}\1\d{1,4}$|^\d{1,3}(\.\d{1,3}){3}$")
_BR_ID_SHAPE = re.compile(r"^\d{3}\.\d{3}\.\d{3}-\d{2}$|^\d{2}\.\d{3}\.\d{3}/\d{4}-\d{2}$")


def phone_ok(s: str) -> bool:
    n = len(_digits(s))
    if not 9 <= n <= 15:
        return False
    if _DATE_OR_QUAD.match(s) or _BR_ID_SHAPE.match(s):
        return False
    # A bare run of digits is too often an order or account number: a phone has a + or separators.
    return s.startswith("+") or bool(re.search(r"[\s().-]", s))


_B = r"(?<![\w@./+-])"  # start boundary: not inside a word, an address, a path or a longer number
_E = r"(?![\w@/-]|\.\w)"  # end boundary
PATTERNS: dict[str, tuple[re.Pattern, Optional[Callable[[str], bool]]]] = {
    "iban": (re.compile(_B + r"[A-Z]{2}\d{2}(?:[ -]?[A-Z0-9]{4}){2,7}(?:[ -]?[A-Z0-9]{1,4})?" + _E), iban_ok),
    "credit_card": (re.compile(_B + r"\d(?:[ -]?\d){12,18}" + _E), card_ok),
    "cnpj": (re.compile(_B + r"\d{2}\.?\d{3}\.?\d{3}/?\d{4}-?\d{2}" + _E), cnpj_ok),
    "cpf": (re.compile(_B + r"\d{3}\.?\d{3}\.?\d{3}-?\d{2}" + _E), cpf_ok),
    "email": (re.compile(r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}(?![\w-])"), None),
    "ip_address": (re.compile(r"(?<![\w.:])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w:]|\.\d)"), None),
    "ipv6": (re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{0,4}|(?:\d{1,3}\.){3}\d{1,3})(?![\w:])"), ipv6_ok),
    "phone": (re.compile(_B + r"(?:\+\d{8,15}|(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,5}(?:[ .-]\d{2,8}){0,4})" + _E), phone_ok),
}
_PRIORITY = {"iban": 0, "credit_card": 1, "cnpj": 2, "cpf": 3, "email": 4, "ip_address": 5, "ipv6": 5, "phone": 6}


def find_pii(text: str, kinds: tuple[str, ...] = KINDS) -> list[Span]:
    """Non-overlapping spans of personal data, in text order; IPv6 is reported as ``ip_address``."""
    cands: list[Span] = []
    for name, (pattern, valid) in PATTERNS.items():
        kind = "ip_address" if name == "ipv6" else name
        if kind not in kinds:
            continue
        for m in pattern.finditer(text):
            if valid is None or valid(m.group()):
                cands.append(Span(kind, m.start(), m.end()))
    # A number shaped like an IBAN, CPF or CNPJ that fails its checksum is a typo, not a phone.
    shaped = [m.span() for name in ("iban", "cnpj", "cpf") for m in PATTERNS[name][0].finditer(text)]
    cands = [c for c in cands if c.kind != "phone" or all(c.end <= a or c.start >= b for a, b in shaped)]
    cands.sort(key=lambda c: (_PRIORITY[c.kind], -(c.end - c.start), c.start))
    taken: list[Span] = []
    for c in cands:
        if all(c.end <= t.start or c.start >= t.end for t in taken):
            taken.append(c)
    return sorted(taken, key=lambda c: c.start)


def redact_text(text: str, kinds: tuple[str, ...] = KINDS, placeholder: str = "<{KIND}>") -> str:
    """``text`` with every detected value replaced by ``placeholder`` (``{KIND}`` -> e.g. ``EMAIL``)."""
    out, pos = [], 0
    for sp in find_pii(text, kinds):
        out.append(text[pos:sp.start])
        out.append(placeholder.format(KIND=sp.kind.upper(), kind=sp.kind))
        pos = sp.end
    out.append(text[pos:])
    return "".join(out)


class PiiParams(GuardParams):
    kinds: list[str] = Field(list(KINDS), description=f"what to detect: any of {', '.join(KINDS)}")
    placeholder: str = Field("<{KIND}>", description="replacement; {KIND} / {kind} is the kind's name")

    @field_validator("kinds")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        bad = [k for k in v if k not in KINDS]
        if bad:
            raise ValueError(f"unknown PII kind(s) {bad}; known: {', '.join(KINDS)}")
        return v


@guard_registry.register("pii")
class PiiGuard(TextGuard):
    """Personal data in the query, the retrieved context or the answer; redacts by default."""

    name = "pii"
    Params = PiiParams
    policies = ("redact", "block", "flag")
    default_policy = "redact"

    def scan(self, text: str) -> list[Finding]:
        # ``match`` stays None: the value itself must never reach notes, the ledger or logs.
        return [Finding(self.name, sp.kind, 1.0, span=(sp.start, sp.end), reason=f"{sp.kind} found")
                for sp in find_pii(text, tuple(self.params.kinds))]

    def redact(self, text: str) -> str:
        return redact_text(text, tuple(self.params.kinds), self.params.placeholder)


def score_detector(cases: list[dict], kinds: tuple[str, ...] = KINDS) -> dict:
    """Precision and recall of :func:`find_pii` on ``[{"text", "entities": [{"kind", "value"}]}]``.

    A prediction is a true positive when its kind and exact text match a labelled entity.
    """
    tp = fp = fn = 0
    by_kind: dict[str, dict[str, int]] = {}
    misses: list[dict] = []
    for case in cases:
        text = case["text"]
        want = {(e["kind"], e["value"]) for e in case["entities"]}
        got = {(sp.kind, text[sp.start:sp.end]) for sp in find_pii(text, kinds)}
        for kind, _ in want | got:
            by_kind.setdefault(kind, {"tp": 0, "fp": 0, "fn": 0})
        for k, v in want & got:
            by_kind[k]["tp"] += 1
        for k, v in got - want:
            by_kind[k]["fp"] += 1
            misses.append({"text": text, "false_positive": [k, v]})
        for k, v in want - got:
            by_kind[k]["fn"] += 1
            misses.append({"text": text, "missed": [k, v]})
        tp, fp, fn = tp + len(want & got), fp + len(got - want), fn + len(want - got)
    return {**_pr(tp, fp, fn), "by_kind": {k: _pr(**c) for k, c in sorted(by_kind.items())}, "errors": misses}


def _pr(tp: int, fp: int, fn: int) -> dict:
    return {"precision": round(tp / (tp + fp), 4) if tp + fp else 1.0, "recall": round(tp / (tp + fn), 4) if tp + fn else 1.0,
            "tp": tp, "fp": fp, "fn": fn}
