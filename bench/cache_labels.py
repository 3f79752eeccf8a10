"""The labelled cache workload: which questions are the same question, written by hand or by the rules below.

    python -m bench.cache_labels          # (re)writes bench/data/cache_labelled.jsonl; a test checks it is current

Every row is one query: ``corpus`` (quickstart: the Python language reference; scifact: SciFact
claims), ``class`` (novel, repeated, paraphrase, near-miss), ``family`` (how it was made),
``group`` (its meaning: a cached answer is right for a query only when their groups and tenants
are equal), ``after`` (the query it varies, asked earlier), ``source`` (hand, or rule:NAME) and
``split`` (calibration or holdout, by the group of the pair's first question: the defaults are
chosen on calibration pairs only and reported on both).

Near-miss families: negation, number (numbers and versions), operator, identifier (code names and
entities), antonym; plus topic (another topic, the same kind of question: the earlier hand set)
and tenant (the same text from another tenant). Paraphrase families: hand (reworded by hand),
template (a question rewritten into another request form, rules ``TEMPLATES``), typo (one letter
of one long word dropped) and repeated forms (case, spacing, trailing punctuation).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
OLD = REPO / "bench" / "data" / "cache_workload.jsonl"  # the hand-written set of the first cache issue
OUT = REPO / "bench" / "data" / "cache_labelled.jsonl"
SCIFACT = REPO.parent / "shared" / "data" / "scifact" / "queries.jsonl"
SCIFACT_CLAIMS = 130  # novel claims drawn (seeded) from SciFact's queries

# (base question, near-miss, family): written by hand over the Python language reference.
QUICKSTART_NEAR = [
    # negation
    ("When is the finally clause executed?", "When is the finally clause not executed?", "negation"),
    ("Which objects are hashable?", "Which objects are not hashable?", "negation"),
    ("What happens if an exception is raised inside __exit__?", "What happens if no exception is raised inside __exit__?", "negation"),
    ("When is the else clause of a for loop executed?", "When is the else clause of a for loop never executed?", "negation"),
    ("Which operators can be overloaded by a class?", "Which operators cannot be overloaded by a class?", "negation"),
    ("What does a function return when it has a return statement?", "What does a function return when it has no return statement?", "negation"),
    ("What happens when a class defines __eq__?", "What happens when a class does not define __eq__?", "negation"),
    ("When is __init__ called?", "When is __init__ not called?", "negation"),
    ("What happens if a key is found in a dict?", "What happens if a key is not found in a dict?", "negation"),
    ("Which statements are allowed in a class body?", "Which statements are not allowed in a class body?", "negation"),
    ("How do I write a loop with a break statement?", "How do I write a loop without a break statement?", "negation"),
    ("Can a lambda expression contain statements?", "Why can't a lambda expression contain statements?", "negation"),
    ("What happens when the with statement body raises an exception?", "What happens when the with statement body raises no exception?", "negation"),
    ("Which names are visible inside a nested function?", "Which names are not visible inside a nested function?", "negation"),
    ("When does a generator expression evaluate its first for clause?", "When does a generator expression not evaluate its first for clause?", "negation"),
    ("What does a bare except clause catch?", "What does a bare except clause never catch?", "negation"),
    # numbers and versions
    ("What was added to the with statement in Python 3.10?", "What was added to the with statement in Python 3.1?", "number"),
    ("What does 7 // 2 evaluate to?", "What does 7 // 3 evaluate to?", "number"),
    ("What changed in Python 3.8 for assignment expressions?", "What changed in Python 3.9 for assignment expressions?", "number"),
    ("What does round(2.5) return?", "What does round(3.5) return?", "number"),
    ("What is the value of 2 ** -1?", "What is the value of 2 ** 1?", "number"),
    ("How do I write a tuple with 1 element?", "How do I write a tuple with 2 elements?", "number"),
    ("What does range(10) produce?", "What does range(1, 10) produce?", "number"),
    ("What is the result of 10 % 3?", "What is the result of 10 % 4?", "number"),
    ("What does the slice a[1:3] return?", "What does the slice a[1:4] return?", "number"),
    ("What does int('10', 2) return?", "What does int('10', 8) return?", "number"),
    ("What is new for f-strings in Python 3.12?", "What is new for f-strings in Python 3.11?", "number"),
    ("What does the index -1 of a list return?", "What does the index -2 of a list return?", "number"),
    ("What does 0.1 + 0.2 evaluate to?", "What does 0.1 + 0.3 evaluate to?", "number"),
    ("Does __exit__ take three arguments?", "Does __exit__ take four arguments?", "number"),
    ("What does 1e3 mean as a float literal?", "What does 1e6 mean as a float literal?", "number"),
    ("What is the first argument of a method?", "What is the second argument of a method?", "number"),
    # operators
    ("What does 7 / 2 evaluate to?", "What does 7 // 2 evaluate to?", "operator"),
    ("What does a ** b compute?", "What does a * b compute?", "operator"),
    ("What does x << 2 do?", "What does x >> 2 do?", "operator"),
    ("How does a < b < c chain?", "How does a <= b <= c chain?", "operator"),
    ("What does x += 1 do to a list?", "What does x -= 1 do to a list?", "operator"),
    ("What does the & operator do on sets?", "What does the | operator do on sets?", "operator"),
    ("What does a @ b compute?", "What does a * b compute for two lists?", "operator"),
    ("Which method does x != y call?", "Which method does x == y call?", "operator"),
    ("What does a % b return for negative numbers?", "What does a // b return for negative numbers?", "operator"),
    ("What does ~x return for an integer?", "What does -x return for an integer?", "operator"),
    ("What does x ^ y do for integers?", "What does x | y do for integers?", "operator"),
    ("What does the walrus operator := do?", "What does the operator = do?", "operator"),
    ("What does x > y call on objects?", "What does x >= y call on objects?", "operator"),
    ("What is the precedence of ** compared to unary -?", "What is the precedence of * compared to unary -?", "operator"),
    ("What does -> mean in a function definition?", "What does = mean in a function definition?", "operator"),
    ("What does a / b return for two integers?", "What does a % b return for two integers?", "operator"),
    # identifiers and entities
    ("How does __getattr__ work?", "How does __getattribute__ work?", "identifier"),
    ("When is __enter__ called?", "When is __exit__ called?", "identifier"),
    ("What does the global statement declare?", "What does the nonlocal statement declare?", "identifier"),
    ("What should __str__ return?", "What should __repr__ return?", "identifier"),
    ("What does list.append do?", "What does list.extend do?", "identifier"),
    ("What does dict.get return for a missing key?", "What does dict.setdefault return for a missing key?", "identifier"),
    ("What does __iter__ return?", "What does __next__ return?", "identifier"),
    ("When is __lt__ used by sorting?", "When is __le__ used by sorting?", "identifier"),
    ("When is __add__ called?", "When is __radd__ called?", "identifier"),
    ("What does str.split do with no arguments?", "What does str.rsplit do with no arguments?", "identifier"),
    ("What does __init__ receive as arguments?", "What does __new__ receive as arguments?", "identifier"),
    ("What does isinstance() check?", "What does issubclass() check?", "identifier"),
    ("What does staticmethod() do?", "What does classmethod() do?", "identifier"),
    ("What is __slots__ used for?", "What is __dict__ used for?", "identifier"),
    ("What does __contains__ implement?", "What does __len__ implement?", "identifier"),
    ("What is sys.exc_info?", "What is sys.exception?", "identifier"),
    # antonyms
    ("What is the difference between mutable sequences and tuples?", "What is the difference between immutable sequences and tuples?", "antonym"),
    ("Which built-in types are mutable?", "Which built-in types are immutable?", "antonym"),
    ("How do I convert a string to upper case?", "How do I convert a string to lower case?", "antonym"),
    ("What does a positive index mean in slicing?", "What does a negative index mean in slicing?", "antonym"),
    ("How do I get the first element of a sequence?", "How do I get the last element of a sequence?", "antonym"),
    ("What is a bound method?", "What is an unbound method?", "antonym"),
    ("What is a synchronous context manager?", "What is an asynchronous context manager?", "antonym"),
    ("What is an inner function?", "What is an outer function?", "antonym"),
    ("How does explicit line joining work?", "How does implicit line joining work?", "antonym"),
    ("What is a shallow copy?", "What is a deep copy?", "antonym"),
    ("What happens to local variables after a function returns?", "What happens to global variables after a function returns?", "antonym"),
    ("What is the maximum recursion depth?", "What is the minimum recursion depth?", "antonym"),
    ("How do I read a file?", "How do I write a file?", "antonym"),
    ("Are leading zeros allowed in integer literals?", "Are trailing zeros allowed in integer literals?", "antonym"),
    ("What does the binary minus operator do?", "What does the unary minus operator do?", "antonym"),
    ("How are positional arguments matched to parameters?", "How are keyword arguments matched to parameters?", "antonym"),
]

# SciFact claims, varied by rules that change what they say (the claim must contain what the rule needs).
NEGATE = [(r"\b(is|are|was|were|can|does|do|has|have)\b", r"\1 not"),
          (r"\b(increases|decreases|reduces|causes|promotes|inhibits|prevents|improves|binds|induces|activates|regulates|"
           r"affects|protects|correlates|leads|enhances|suppresses|impairs|requires|predicts|shows|contributes|blocks)\b",
           lambda m: "does not " + re.sub(r"(ies)$", "y", re.sub(r"(sses|ches|shes|xes)$", lambda k: k.group(1)[:-2], re.sub(r"(?<!s)s$", "", m.group(1)))))]
OPPOSITE = {"increases": "decreases", "decreases": "increases", "increase": "decrease", "decrease": "increase",
            "increased": "decreased", "decreased": "increased", "higher": "lower", "lower": "higher", "more": "less",
            "less": "more", "better": "worse", "worse": "better", "positive": "negative", "negative": "positive",
            "promotes": "inhibits", "inhibits": "promotes", "activates": "inhibits", "reduces": "increases",
            "reduced": "increased", "elevated": "reduced", "high": "low", "low": "high", "enhances": "suppresses",
            "suppresses": "enhances", "improves": "worsens", "upregulates": "downregulates", "downregulates": "upregulates",
            "greater": "smaller", "poorer": "better", "risk": "risk", "early": "late", "late": "early", "younger": "older",
            "older": "younger", "benign": "malignant", "malignant": "benign", "acute": "chronic", "chronic": "acute"}
_ENTITY = re.compile(r"\b[A-Za-z]*[A-Z][A-Za-z]*\d[\w-]*\b|\b[A-Z]{2,}[A-Za-z0-9-]*\b")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*")

# Request forms that leave the question alone (rules; the content words are kept in order).
TEMPLATES = [
    (r"^What is (.+)\?$", r"Could you tell me what \1 is?"),
    (r"^What are (.+)\?$", r"Tell me what \1 are."),
    (r"^What does (.+) do\?$", r"Explain what \1 does."),
    (r"^How does (.+) work\?$", r"Can you explain how \1 works?"),
    (r"^How do (.+) work\?$", r"Please explain how \1 work."),
    (r"^How do I (.+)\?$", r"How can I \1?"),
    (r"^How are (.+)\?$", r"Explain how \1 are."),
    (r"^When are (.+)\?$", r"Tell me when \1 are."),
    (r"^What (.+)\?$", r"I want to know what \1."),
]
CLAIM_TEMPLATES = ["Is it the case that {c}?", "Tell me whether {c}.", "Can you tell me whether {c}?",
                   "I want to know whether {c}."]


def _split(group: str) -> str:
    return "calibration" if int(hashlib.sha256(group.encode()).hexdigest(), 16) % 2 == 0 else "holdout"


def _typo(text: str, rng: random.Random) -> Optional[str]:
    """Drop one inner letter of one plain word of eight letters or more (never a code name or number)."""
    words = [m for m in re.finditer(r"\b[a-z]{8,}\b", text)]
    if not words:
        return None
    m = rng.choice(words)
    i = rng.randrange(2, len(m.group()) - 2)
    return text[: m.start() + i] + text[m.start() + i + 1:]


def _template(text: str) -> Optional[str]:
    for pat, rep in TEMPLATES:
        if re.match(pat, text):
            return re.sub(pat, rep, text)
    return None


def _claim_body(claim: str) -> str:
    c = claim.strip().rstrip(".")
    return c[0].lower() + c[1:] if c[:1].isupper() and not c[1:2].isupper() and not c[1:2].isdigit() else c


def _negate(claim: str) -> Optional[str]:
    for pat, rep in NEGATE:
        if re.search(pat, claim) and " not " not in claim:
            return re.sub(pat, rep, claim, count=1)
    return None


def _antonym(claim: str) -> Optional[str]:
    for w in re.findall(r"[A-Za-z]+", claim):
        o = OPPOSITE.get(w.lower())
        if o and o != w.lower():
            return re.sub(rf"\b{w}\b", o, claim, count=1)
    return None


def _number(claim: str) -> Optional[str]:
    m = _NUMBER.search(claim)
    if not m:
        return None
    digits = m.group().replace(",", "")
    try:
        v = float(digits)
    except ValueError:
        return None
    new = str(int(v) * 2 if v == int(v) and v > 1 else int(v) + 1 if v == int(v) else round(v * 2, 3))
    return claim[: m.start()] + new + claim[m.end():]


def _entity(claim: str, others: list[str], rng: random.Random) -> Optional[str]:
    mine = _ENTITY.findall(claim)
    if not mine:
        return None
    pool = sorted({e for o in others for e in _ENTITY.findall(o)} - set(mine))
    if not pool:
        return None
    old = mine[0]
    return claim.replace(old, rng.choice(pool), 1)


def rows() -> list[dict[str, Any]]:
    rng = random.Random(26)
    out: list[dict[str, Any]] = []

    def add(corpus: str, cls: str, family: str, text: str, source: str, after: Optional[str] = None,
            group: Optional[str] = None, tenant: str = "a", rid: Optional[str] = None) -> str:
        rid = rid or f"{corpus[:2]}-{len(out)}"
        first = after or rid
        first_group = next((r["group"] for r in out if r["id"] == first), rid)
        out.append({"id": rid, "corpus": corpus, "class": cls, "family": family, "text": text, "tenant": tenant,
                    "group": group or rid, "after": after, "source": source, "split": _split(first_group)})
        return rid

    # 1. The first hand set: its novel questions, paraphrases, repeats, topic and tenant near-misses.
    old = [json.loads(line) for line in OLD.read_text().splitlines() if line.strip()]
    ids = {}
    for r in sorted(old, key=lambda r: r["class"] != "novel"):
        after = ids.get(r.get("after")) if r.get("after") else None
        src_group = next((x["group"] for x in out if x["id"] == after), None)
        if r["class"] == "novel":
            ids[r["id"]] = add("quickstart", "novel", "hand", r["text"], "hand", rid=f"qs-{r['id']}")
        elif r["class"] in ("paraphrase", "repeated"):
            ids[r["id"]] = add("quickstart", r["class"], "hand" if r["class"] == "paraphrase" else "form", r["text"], "hand",
                               after=after, group=src_group, rid=f"qs-{r['id']}", tenant=r.get("tenant", "a"))
        else:  # near-miss: another topic (own meaning), or the same text asked by another tenant (same meaning, other scope)
            fam = "tenant" if r.get("kind") == "tenant" else "topic"
            ids[r["id"]] = add("quickstart", "near-miss", fam, r["text"], "hand", after=after,
                               group=src_group if fam == "tenant" else None, rid=f"qs-{r['id']}", tenant=r.get("tenant", "a"))
    novels = [r for r in out if r["class"] == "novel"]
    # 2. Rule paraphrases of those novel questions: a template rewrite and, where a long word exists, a typo.
    for r in novels:
        t = _template(r["text"])
        if t:
            add("quickstart", "paraphrase", "template", t, "rule:template", after=r["id"], group=r["group"])
        t = _typo(r["text"], rng)
        if t:
            add("quickstart", "paraphrase", "typo", t, "rule:typo", after=r["id"], group=r["group"])
    # 3. Hand near-miss pairs over the Python reference; each base question is asked first.
    for base, near, fam in QUICKSTART_NEAR:
        b = add("quickstart", "novel", "hand", base, "hand")
        add("quickstart", "near-miss", fam, near, "hand", after=b)
        t = _template(base)
        if t:  # the base's own paraphrase: it must still hit with its near-miss in the cache
            add("quickstart", "paraphrase", "template", t, "rule:template", after=b, group=b)
    # 4. SciFact claims: novel claims, rule paraphrases, rule near-misses (negation, number, antonym, entity).
    claims = [json.loads(line)["text"] for line in SCIFACT.read_text().splitlines() if line.strip()]
    picked = random.Random(2026).sample(claims, SCIFACT_CLAIMS)
    for c in picked:
        n = add("scifact", "novel", "claim", c, "scifact")
        body = _claim_body(c)
        for tmpl in rng.sample(CLAIM_TEMPLATES, 2):
            add("scifact", "paraphrase", "template", tmpl.format(c=body), "rule:claim-template", after=n, group=n)
        t = _typo(c, rng)
        if t:
            add("scifact", "paraphrase", "typo", t, "rule:typo", after=n, group=n)
        for fam, make in (("negation", _negate), ("antonym", _antonym), ("number", _number),
                          ("identifier", lambda x: _entity(x, picked, rng))):
            v = make(c)
            if v and v != c:
                add("scifact", "near-miss", fam, v, f"rule:{fam}", after=n)
    return _order(_merge_same_text(out), rng)


# Questions the rows above hold under two groups that a reader judges the same question (found while
# reading the false hits of a calibration run, and relabelled by hand, never by what the cache did).
SAME_QUESTION = [("What is an integer literal?", "What are integer literals?"),
                 ("What does pass do?", "What does the pass statement do?"),
                 # the antonym rule's "decreases" of one SciFact claim is another claim's "reduces" (found by the
                 # synonym rule's first calibration: decreases/reduces was counted a false hit; it is not one)
                 ("N-terminal cleavage reduces success identifying transcription start sites.",
                  "N-terminal cleavage decreases success identifying transcription start sites."),
                 ("Chenodeosycholic acid treatment reduces whole-body energy expenditure.",
                  "Chenodeosycholic acid treatment decreases whole-body energy expenditure.")]


def _merge_same_text(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One text, one meaning: rows whose texts (and tenants) are equal share a group; the split follows
    the group of each pair's first question."""
    parent: dict[str, str] = {}

    def root(g: str) -> str:
        while parent.get(g, g) != g:
            g = parent[g]
        return g

    first: dict[tuple[str, str], str] = {}
    for r in out:
        key = (r["text"], r["tenant"])
        if key in first and root(first[key]) != root(r["group"]):
            parent[root(r["group"])] = root(first[key])
        first.setdefault(key, r["group"])
    for a, b in SAME_QUESTION:
        ga, gb = first.get((a, "a")), first.get((b, "a"))
        if ga and gb and root(ga) != root(gb):
            parent[root(gb)] = root(ga)
    by_id = {r["id"]: r for r in out}
    for r in out:
        r["group"] = root(r["group"])
    for r in out:
        r["split"] = _split(by_id[r["after"]]["group"] if r["after"] else r["group"])
    return out


def _order(out: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """A replay order: every query after the one it varies, otherwise shuffled (seeded), corpus by corpus."""
    at: dict[str, float] = {}
    for r in out:
        start = at[r["after"]] if r["after"] else 0.0
        at[r["id"]] = start + rng.random() * (1.0 - start) * (0.5 if r["after"] else 1.0)
    return sorted(out, key=lambda r: (r["corpus"] != "quickstart", at[r["id"]]))


def main() -> int:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows())
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(REPO)}: {text.count(chr(10))} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
