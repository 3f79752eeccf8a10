"""Whether two questions mean the same: the words in which they differ must not carry meaning.

A semantic cache candidate is a different question, however close its embedding, when the two
texts differ in

- **negation**: a different count of negating words (not, no, never, without, cannot, n't ...);
- **numbers and versions**: a different multiset of numerals (``3.1`` vs ``3.10``, ``7 // 2`` vs ``7 // 3``);
- **contrast words**, which are never noise though some are function words: a quantifier swapped for one
  of another kind (all/every/each against any/some, both against either, only against none of them: a
  quantifier on one side alone is filler, "is there any way to ..."), and a different number base or unit
  (hexadecimal vs octal, seconds vs milliseconds; hex and hexadecimal are one base);
- **operators**: a different multiset of operator symbols (``/`` vs ``//``, ``<<`` vs ``>>``);
- **identifiers and entities**: a different set of code names, code keywords or entity-like tokens
  (``__getattr__`` vs ``__getattribute__``, ``list.append``, ``global`` vs ``nonlocal``, ``APOE4``, ``IL-6``);
- **antonyms**: a word on one side whose opposite is on the other (a small lexicon, and opposite
  prefixes over one stem: mutable/immutable, upregulate/downregulate, increase/decrease), comparatives
  and superlatives read by their base (faster/slower, largest/smallest);
- **order**: two words both share, written in the other order around the same link: the same words
  between them in both, or a directional word or another shared word both have between them (A than
  B / B than A, str to an int / int to a str, list of dicts / dict of lists, IL-6 activates STAT3 /
  STAT3 activates IL-6). Other word order is style ("is a key in a dict" / "does a dict have the
  key", "between A and B" / "between B and A"); a clause fronted before a comma ("In a for loop,
  when ...") may move as a block;
- **content**: any other content words, weighted by their inverse document frequency in the
  corpus (rare words carry meaning; ``work``, ``use``, ``python`` barely do). The sum over the
  symmetric difference must stay within ``max_weight``. A differing word on one side and one on
  the other that are near-synonyms in the embedder's own space (``similar(x, y)`` at least
  ``min_word_similarity``: create/make, error/exception, increases/raises) are matched one to
  one, most similar first, and weigh nothing.

Each rule reads the two texts only; the weight reads the corpus's document frequencies
(:class:`Vocabulary`, built once from the store's chunk texts); the word similarity is a callable
the caller passes (:class:`ragcost.cache.words.WordVectors`). Nothing here loads a model.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

_CONTRACTION = re.compile(r"(\w)n['’]t\b", re.I)
_CANNOT = re.compile(r"\bcannot\b", re.I)
_TOKEN = re.compile(
    r"(?P<num>(?<![\w.])[-+]?\d+(?:[.,]\d+)*%?)"                              # 3.10, 1,000, -1, 5%
    r"|(?P<word>[A-Za-z_][\w]*(?:[-'][A-Za-z0-9]\w*)*(?:\.[A-Za-z_]\w*)*(?:\(\))?)"  # words, __x__, list.sort, f-string, x()
    r"|(?P<op>\*\*=?|//=?|<<=?|>>=?|->|:=|[=!<>]=|[-+*/%@&|^~<>]=?|=)"         # operators (not ? . , ;)
)

NEGATIONS = frozenset("not no never none nothing nobody neither nor without cannot non unless except lack lacks lacking "
                      "absent absence fail fails failed".split())
NUMBER_WORDS = frozenset("zero one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty "
                         "hundred thousand million billion half twice double triple single first second third fourth "
                         "fifth tenth once".split())
# Words that ask rather than say: a rewording changes them without changing the question.
STOPWORDS = frozenset("""
a an the of to in on at by for with about as from into onto over under than then and or but if so that this these those
there here it its it's is are was were be been being am do does did doing done have has had having can could would should
will shall may might must i me my mine we us our you your he she they them their what which who whom whose when where why
how whether any some each every all both such very just also only really actually exactly please tell explain describe
know want wanted like mean means meaning meant way ways thing things kind sort one ones get gets
something anything case happen happens happening going say said let lets give whether
""".split())
# Quantifiers by kind: swapping one kind for another changes the question ("all elements satisfy" vs "any element
# satisfies"); the words are function words, so the content rule would never see them. None/no/never are negations.
QUANTIFIERS = {
    **dict.fromkeys(("all", "every", "each", "always", "entire", "whole", "everything", "everyone", "everywhere"), "universal"),
    **dict.fromkeys(("any", "some", "anything", "anyone", "somewhere", "sometimes"), "existential"),
    "both": "both", "either": "either",
    **dict.fromkeys(("only", "solely", "exclusively"), "exclusive"),
    **dict.fromkeys(("most", "majority"), "most"), **dict.fromkeys(("few", "minority"), "few"),
    **dict.fromkeys(("many", "several", "numerous", "multiple"), "many"),
}
# Number bases and units: the same number in another base or unit is another question. Spellings of one unit
# share a canonical name (hex = hexadecimal, ms = millisecond); plurals are read by their stem.
UNITS = {
    **dict.fromkeys(("binary", "bin", "base2"), "base 2"), **dict.fromkeys(("octal", "oct", "base8"), "base 8"),
    **dict.fromkeys(("decimal", "base10"), "base 10"), **dict.fromkeys(("hexadecimal", "hex", "base16"), "base 16"),
    **dict.fromkeys(("base64",), "base 64"),
    **dict.fromkeys(("bit", "bits"), "bit"), **dict.fromkeys(("byte", "bytes"), "byte"),
    **dict.fromkeys(("kb", "kilobyte", "kilobytes", "kib", "kibibyte"), "kilobyte"),
    **dict.fromkeys(("mb", "megabyte", "megabytes", "mib", "mebibyte"), "megabyte"),
    **dict.fromkeys(("gb", "gigabyte", "gigabytes", "gib", "gibibyte"), "gigabyte"),
    **dict.fromkeys(("ns", "nanosecond", "nanoseconds"), "nanosecond"),
    **dict.fromkeys(("microsecond", "microseconds"), "microsecond"),  # not "us": the pronoun
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), "millisecond"),
    **dict.fromkeys(("seconds", "sec", "secs"), "second"),  # not "second": the ordinal
    **dict.fromkeys(("minute", "minutes", "mins"), "minute"),  # not "min": min() and the minimum **dict.fromkeys(("hour", "hours"), "hour"),
    **dict.fromkeys(("day", "days"), "day"), **dict.fromkeys(("week", "weeks"), "week"),
    **dict.fromkeys(("month", "months"), "month"), **dict.fromkeys(("year", "years"), "year"),
    **dict.fromkeys(("celsius",), "celsius"), **dict.fromkeys(("fahrenheit",), "fahrenheit"),
    **dict.fromkeys(("utf-8", "utf8"), "utf-8"), **dict.fromkeys(("utf-16", "utf16"), "utf-16"),
    **dict.fromkeys(("ascii",), "ascii"), **dict.fromkeys(("latin-1", "latin1"), "latin-1"),
    **dict.fromkeys(("radian", "radians"), "radian"), **dict.fromkeys(("degree", "degrees"), "degree"),
}
# Opposites over one stem (a light stem: see _stem). Either side may carry either word.
ANTONYMS = [
    ("enable", "disable"), ("increase", "decrease"), ("increase", "reduce"), ("higher", "lower"), ("more", "less"),
    ("more", "fewer"), ("greater", "smaller"), ("greater", "less"), ("better", "worse"), ("better", "poorer"),
    ("positive", "negative"), ("true", "false"), ("first", "last"), ("before", "after"), ("start", "end"),
    ("start", "stop"), ("open", "close"), ("read", "write"), ("get", "set"), ("add", "remove"), ("add", "delete"),
    ("push", "pop"), ("inner", "outer"), ("public", "private"), ("local", "global"), ("explicit", "implicit"),
    ("deep", "shallow"), ("upper", "lower"), ("left", "right"), ("major", "minor"), ("high", "low"), ("long", "short"),
    ("early", "late"), ("promote", "inhibit"), ("promote", "suppress"), ("activate", "inhibit"), ("activate", "repress"),
    ("gain", "loss"), ("benefit", "harm"), ("rise", "fall"), ("success", "failure"), ("accept", "reject"),
    ("include", "exclude"), ("maximum", "minimum"), ("max", "min"), ("largest", "smallest"), ("fast", "slow"),
    ("strong", "weak"), ("input", "output"), ("import", "export"), ("keyword", "positional"), ("sync", "async"),
    ("same", "different"), ("always", "never"), ("all", "none"), ("static", "dynamic"), ("absolute", "relative"),
    ("binary", "unary"), ("compound", "simple"), ("lazy", "eager"), ("strict", "lenient"), ("raise", "lower"),
    ("enter", "exit"), ("begin", "end"), ("lead", "trail"), ("leading", "trailing"), ("prefix", "suffix"),
    ("encode", "decode"), ("serialize", "deserialize"), ("acquire", "release"), ("lock", "unlock"),
    ("upregulate", "downregulate"), ("overexpression", "underexpression"), ("agonist", "antagonist"),
    ("benign", "malignant"), ("acute", "chronic"), ("male", "female"), ("adult", "child"), ("old", "young"),
    ("older", "younger"), ("increased", "decreased"), ("elevated", "reduced"), ("improve", "worsen"),
    ("protect", "damage"), ("presence", "absence"), ("sufficient", "insufficient"), ("necessary", "unnecessary"),
    ("cheap", "expensive"), ("big", "small"), ("large", "small"), ("wide", "narrow"), ("heavy", "light"),
    ("easy", "hard"), ("easy", "difficult"), ("safe", "dangerous"), ("new", "old"), ("newer", "older"),
    ("quick", "slow"), ("quickly", "slowly"), ("efficient", "inefficient"), ("mutable", "immutable"),
    ("ascending", "descending"), ("ascend", "descend"), ("forward", "backward"), ("forwards", "backwards"),
    ("min", "max"), ("least", "most"), ("fewest", "most"), ("worst", "best"), ("earliest", "latest"),
    ("union", "intersection"), ("top", "bottom"), ("topmost", "bottommost"), ("above", "below"), ("sender", "receiver"), ("client", "server"), ("parent", "child"),
    ("superclass", "subclass"), ("caller", "callee"), ("upper", "lower"), ("uppercase", "lowercase"),
]
# Opposite prefixes over one stem: im-mutable, un-bound, up/down-regulate, hyper/hypo-, over/under-.
NEGATING_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non", "non-", "a", "de", "anti", "counter")
PAIRED_PREFIXES = [("up", "down"), ("top", "bottom"), ("over", "under"), ("pre", "post"), ("hyper", "hypo"), ("in", "de"),
                   ("inter", "intra"), ("max", "min"), ("upper", "lower"), ("en", "dis"), ("inc", "dec"), ("pro", "anti")]
_SUFFIXES = ("ations", "ation", "ingly", "ings", "ing", "edly", "ed", "es", "s", "ly")


def _stem(word: str) -> str:
    """A light, shared stem: case folded, British -ise spelt -ize, one inflectional suffix dropped."""
    w = word.casefold()
    if len(w) <= 3 or not w.isalpha():
        return w
    w = re.sub(r"is(e|ed|es|ing|ation|ations)$", r"iz\1", w)
    for suf in _SUFFIXES:
        if w.endswith(suf) and len(w) - len(suf) >= 3 and not (suf == "s" and w.endswith("ss")):
            w = w[: -len(suf)]
            break
    return w[:-1] if w.endswith("e") and len(w) > 4 else w


# What a question may be wrapped in without changing what it asks: a greeting, thanks, a filler, and the frames that
# only ask ("can you tell me", "walk me through", "what's the point of", "under what circumstances"). Removed before
# the words are compared; nothing in them is content.
_FRAME = re.compile(
    r"^\s*(?:(?:hi|hey|hello|yo|um+|uh+|so|ok(?:ay)?|quick (?:question|q)|question)(?=[\s,:!.]|$)[\s,:!.]*)+"
    r"|(?:[\s,.!?]+(?:thanks|thank you|thx|ty|pls|plz|please|lol|cheers|right)[\s.!?]*)+$"
    r"|^\s*(?:is there (?:any )?evidence that|is it true that|does the evidence show that|"
    r"(?:tell me|can you check|check) (?:whether|if))\b"
    r"|\b(?:(?:can|could|would) you (?:please )?(?:tell|show|explain to|explain) me|i(?:'d| would) like to (?:know|understand)|"
    r"i want to (?:know|understand)|walk me through|help me understand|do you know|any idea)\b"
    r"|\bwhat(?:'s| is) the (?:point|purpose) of\b|\bunder what circumstances\b|\bgive me an overview of\b",
    re.I)
KEYWORD_PAIRS = frozenset({("yield", "from"), ("async", "for"), ("async", "with"), ("async", "def")})

# Code keywords that are no English function word (global, nonlocal, lambda, yield, ...): names, not prose.
CODE_KEYWORDS = frozenset(k.casefold() for k in __import__("keyword").kwlist) - STOPWORDS - NEGATIONS - {"true", "false"}
_ANTONYM_STEMS = {frozenset((_stem(a), _stem(b))) for a, b in ANTONYMS}
_STOP_STEMS = frozenset(_stem(w) for w in STOPWORDS) | STOPWORDS


@dataclass(frozen=True)
class Parsed:
    """A question's tokens by kind: what each rule compares."""

    negations: int
    numbers: Counter
    operators: Counter
    identifiers: frozenset
    words: Counter  # stems of the content words (not stopwords, numbers, operators or identifiers)
    raw: dict  # stem -> the word as written (case folded): what a typo is judged on
    order: tuple  # the content stems and names in the order they are written (first occurrence)
    fronted: tuple = ()  # the content stems of a clause fronted before the first comma ("In Python, ...")
    quantifiers: Counter = field(default_factory=Counter)  # QUANTIFIERS' kinds, counted
    units: frozenset = frozenset()  # UNITS' canonical names
    seq: tuple = ()  # every word in order: content words by stem, names and function words as written (case folded)


def _identifier_like(tok: str) -> bool:
    """Code names and entity-like tokens: __x__, a.b, f(), snake_case, camelCase, ALDH1, AMPK, IL-6, iPSC."""
    if "_" in tok or "." in tok or tok.endswith("()"):
        return True
    body = tok.replace("-", "").replace("'", "")
    upper = sum(ch.isupper() for ch in body)
    digit = any(ch.isdigit() for ch in body)
    if digit and any(ch.isalpha() for ch in body):
        return True
    if upper >= 2:
        return True  # AMPK, PrP, iPSC, vCJD (a capital inside a word, or two)
    return upper == 1 and not body[0].isupper()  # camelCase, mRNA-like


def _shouted(text: str) -> bool:
    letters = [ch for ch in text if ch.isalpha()]
    return len(letters) >= 8 and sum(ch.isupper() for ch in letters) > 0.8 * len(letters)


# "the in operator", "the for statement", "an else clause": the word before the kind is a name.
_NAMED = re.compile(r"\b(?:the|a|an)\s+([a-z]+)\s+(?:stat\w*|cla\w*|loop\w*|oper\w*|keyw\w*|expr\w*)\b", re.I)  # statemnt too
PY_KEYWORDS = frozenset(k.casefold() for k in __import__("keyword").kwlist)


@functools.lru_cache(maxsize=8192)  # a cached question is compared again and again
def parse(text: str) -> Parsed:
    if _shouted(text):  # WHAT IS A LAMBDA? is not a sentence of acronyms
        text = text.casefold()
    text = _CANNOT.sub("can not", _CONTRACTION.sub(r"\1 not", text))
    text = _FRAME.sub(" ", text)  # greetings, thanks and the frames that only ask: no part of the question
    named = {m.group(1).casefold() for m in _NAMED.finditer(text)}
    neg = 0
    numbers: Counter = Counter()
    ops: Counter = Counter()
    idents: set[str] = set()
    words: Counter = Counter()
    quants: Counter = Counter()
    units: set[str] = set()
    raw: dict[str, str] = {}
    order: list[str] = []
    seq: list[str] = []
    prev: Optional[str] = None  # the previous word, for keyword pairs (yield from, async for, is not)
    # One-letter names: a capital letter after the first word (class A, the B isoform), and any letter a code
    # span uses as a name (`a and b`): there, and everywhere else in the text, the letter is a name, not "a".
    letters = {w for span in re.findall(r"`([^`]*)`", text) for w in re.findall(r"(?<![\w.])[A-Za-z](?![\w(])", span)}
    for m in _TOKEN.finditer(text):
        if m.group("num") is not None:
            numbers[m.group("num").replace(",", "")] += 1
            continue
        if m.group("op") is not None:
            ops[m.group("op")] += 1
            continue
        tok = re.sub(r"['’]s$", "", m.group("word"))  # an object's identity: the object's word
        low = tok.casefold()
        pair, prev = (prev, low), low
        if len(tok) == 1 and (tok in letters or (tok.isupper() and tok != "I" and text[: m.start()].strip())):
            name = f"<{tok}>"  # one-letter names: their order matters (is A the superclass of B)
            idents.add(name)
            seq.append(name)
            if name not in order:
                order.append(name)
            continue
        if pair in KEYWORD_PAIRS:  # yield from, async for (not "a class in Python", not "yield and return")
            idents.add(f"{pair[0]} {low}")
        if low in named and low in PY_KEYWORDS:
            idents.add(low)  # the if statement, the in operator: a name, though an English word too
            seq.append(low)
            if low not in order:
                order.append(low)
            continue
        if low in NEGATIONS:
            neg += 1
            continue
        if low in QUANTIFIERS:
            quants[QUANTIFIERS[low]] += 1  # and on: "all" is also a stopword, "whole" a content word
        if low in UNITS:
            units.add(UNITS[low])
            seq.append(UNITS[low])  # a unit has its place too: bytes to str / str to bytes
            if UNITS[low] not in order:
                order.append(UNITS[low])
            continue
        if low in NUMBER_WORDS:
            numbers[low] += 1
            continue
        if _identifier_like(tok) or low in CODE_KEYWORDS:
            idents.add(low)
            seq.append(low)
            if low not in order:
                order.append(low)  # names keep their place too: "in the else clause ... the except clause"
            continue
        if low in STOPWORDS:
            seq.append(low)
            continue
        stem = _stem(tok)
        seq.append(low if low in DIRECTIONAL else stem)
        if stem not in _STOP_STEMS:
            words[stem] += 1
            raw.setdefault(stem, low)
            if stem not in order:
                order.append(stem)
    fronted: tuple = ()
    head = _FRONTED.match(text)
    if head:
        written = [re.sub(r"['’]s$", "", w) for w in re.findall(r"[A-Za-z_][\w.'’-]*", head.group(1))]
        inside = {_stem(w) for w in written} | {w.casefold() for w in written}
        fronted = tuple(w for w in order if w in inside)
    return Parsed(neg, numbers, ops, frozenset(idents), words, raw, tuple(order), fronted, quants, frozenset(units),
                  tuple(seq))


# A clause fronted before a comma, led by a preposition or subordinator: it may move as a whole.
_FRONTED = re.compile(r"^\s*((?:in|on|at|for|with|without|within|inside|during|after|before|when|while|if|once|"
                      r"from|under|by|among|across|through)\b[^,?]{1,80}),", re.I)


def _moved_clause(pa: Parsed, pb: Parsed, shared: set) -> bool:
    """One text is the other with a fronted clause moved as a block: the rest keeps its order, and the
    clause's words stand together, in the same order, in the other text."""
    for p, q in ((pa, pb), (pb, pa)):
        block = [w for w in p.fronted if w in shared]
        if not block:
            continue
        rest_p = [w for w in p.order if w in shared and w not in block]
        rest_q = [w for w in q.order if w in shared and w not in block]
        seq = [w for w in q.order if w in shared]
        at = [i for i, w in enumerate(seq) if w in block]
        if rest_p == rest_q and [seq[i] for i in at] == block and at == list(range(at[0], at[0] + len(at))):
            return True
    return False


# A link that reads the same both ways: A and B / B and A (an article beside "and" or "or"; "a" alone is no such link:
# is a string a sequence / is a sequence a string).
SYMMETRIC = frozenset("and or a an the".split())
# Words that give the words on either side their roles: A than B, from A to B, A of B, A before B.
DIRECTIONAL = frozenset("than to from into onto toward towards vs versus before after over under above below of by "
                        "against instead rather in on with for at between through via per within inside outside".split())


def _swapped_across(pa: Parsed, pb: Parsed, shared: set) -> Optional[tuple[str, str, str]]:
    """Two shared words written in the other order around the same link: the same words between them in both
    texts (is a sequence a string / is a string a sequence), or a directional word or another shared word both
    have between them (str to an int / int to a str; antibody targeting of N-cadherin inhibits metastasis /
    metastasis inhibits antibody targeting of N-cadherin). Otherwise word order is style: "is a key in a dict" /
    "does a dict have the key", "the syntax of list comprehensions" / "list comprehension syntax", "the
    difference between A and B" / "between B and A". A passive rewording ("B is activated by A") is refused
    too: the rule cannot tell it from a role swap, and a refusal costs a miss, not a wrong answer."""
    first_a = {w: i for i, w in reversed(list(enumerate(pa.seq)))}
    first_b = {w: i for i, w in reversed(list(enumerate(pb.seq)))}
    last_a = {w: i for i, w in enumerate(pa.seq)}
    last_b = {w: i for i, w in enumerate(pb.seq)}
    words = [w for w in pa.order if w in shared and w in first_a and w in first_b]
    # First mentions, then last ones: "In `a and b`, is a evaluated before b?" differs only in its second.
    for pos_a, pos_b in ((first_a, first_b), (last_a, last_b)):
        swap = _swap_in(pa, pb, shared, words, pos_a, pos_b)
        if swap is not None:
            return swap
    return None


def _swap_in(pa: Parsed, pb: Parsed, shared: set, words: list, pos_a: dict, pos_b: dict) -> Optional[tuple[str, str, str]]:
    for i, x in enumerate(words):
        for y in words[i + 1:]:
            (ax, ay), (bx, by) = (pos_a[x], pos_a[y]), (pos_b[x], pos_b[y])
            if (ax < ay) == (bx < by):
                continue
            between_a = pa.seq[min(ax, ay) + 1: max(ax, ay)]
            between_b = pb.seq[min(bx, by) + 1: max(bx, by)]
            symmetric = set(between_a) <= SYMMETRIC and bool(set(between_a) & {"and", "or"})
            if between_a and between_a == between_b and not symmetric:  # one link, its two ends swapped
                return x, y, " ".join(between_a)
            pivots = set(between_a) & set(between_b) & (DIRECTIONAL | shared)
            if pivots:
                return x, y, sorted(pivots)[0]
            da, db = set(between_a) & DIRECTIONAL, set(between_b) & DIRECTIONAL
            if da and db:  # a relation both ways, in other words: the code point of a character / a character for it
                return x, y, f"{sorted(da)[0]}/{sorted(db)[0]}"
    return None


def _bases(w: str) -> set[str]:
    """``w`` and, for a comparative or superlative, its base's stems: faster -> fast, bigger -> big, easiest -> easy."""
    out = {w}
    for suf in ("est", "er"):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            base = w[: -len(suf)]
            out |= {base, _stem(base), _stem(base + "e")}
            if base.endswith("i"):
                out.add(base[:-1] + "y")  # easier -> easy
            if len(base) >= 3 and base[-1] == base[-2]:
                out.add(base[:-1])  # bigger -> big
    return out


def _opposite(a: str, b: str) -> bool:
    if frozenset((a, b)) in _ANTONYM_STEMS:
        return True
    if any(frozenset((x, y)) in _ANTONYM_STEMS for x in _bases(a) for y in _bases(b) if x != y):
        return True  # faster / slower, largest / smallest
    if "-" in a or "-" in b:  # high-sensitivity / low-sensitivity
        pa, pb = a.split("-"), b.split("-")
        return any(_opposite(x, y) for x in pa for y in pb if x != y)
    short, long_ = sorted((a, b), key=len)
    if len(short) >= 4 and any(long_ == p + short for p in NEGATING_PREFIXES):
        return True
    for p, q in PAIRED_PREFIXES:
        for x, y in ((a, b), (b, a)):
            if x.startswith(p) and y.startswith(q) and len(x) - len(p) >= 4 and x[len(p):] == y[len(q):]:
                return True
    return False


_ALPHA = re.compile(r"(?<![\w.])[A-Za-z]+(?![\w.(])")  # a plain word: not part of a name, a number or a call
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
MIN_TYPO_LENGTH = 5  # shorter words have too many neighbours (lust: list, last, just)


def _prefixed(a: str, b: str) -> bool:
    """One word is the other with a negating prefix: synchronous / asynchronous, typical / atypical."""
    short, long_ = sorted((a, b), key=len)
    return any(long_ == p + short for p in NEGATING_PREFIXES)


def _edits1(w: str) -> set[str]:
    """Every string one Damerau-Levenshtein edit from ``w`` (a letter dropped, swapped, replaced or added)."""
    splits = [(w[:i], w[i:]) for i in range(len(w) + 1)]
    return ({a + b[1:] for a, b in splits if b} | {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
            | {a + c + b[1:] for a, b in splits if b for c in _LETTERS} | {a + c + b for a, b in splits for c in _LETTERS})


class Vocabulary:
    """Document frequencies of content-word stems in a corpus (what a differing word weighs: its IDF), and of
    its plain words as written (``forms``: what a misspelt word is corrected to)."""

    def __init__(self, docs: int, df: dict[str, int], forms: Optional[dict[str, int]] = None) -> None:
        self.docs, self.df, self.forms = docs, df, forms or {}
        self._top = math.log(1 + docs)

    @classmethod
    def build(cls, texts: Iterable[str]) -> "Vocabulary":
        df: Counter = Counter()
        forms: Counter = Counter()
        n = 0
        for t in texts:
            n += 1
            p = parse(t or "")
            df.update(set(p.words) | p.identifiers)
            forms.update({w.casefold() for w in _ALPHA.findall(t or "") if len(w) >= MIN_TYPO_LENGTH - 1})
        return cls(n, dict(df), dict(forms))

    def correct(self, text: str) -> tuple[str, list[tuple[str, str]]]:
        """``text`` with its misspelt words replaced by the corpus's own spelling, and the (typo, fix) pairs.

        A word is corrected only when it is a plain lower-case-able word of at least ``MIN_TYPO_LENGTH``
        letters that the corpus never uses (neither the word nor its stem), is no function, negation,
        quantifier, unit or number word, and exactly one corpus word one edit away is clearly the most
        used (twice the next): ``gloabl`` -> ``global``, ``asert`` -> ``assert``, ``nonlocl`` -> ``nonlocal``.
        A name (``__x__``, ``IL-6``, ``camelCase``) and a word the corpus knows are never touched, so a real
        word is never swapped for another (affect/effect, form/from).
        """
        if not self.forms:
            return text, []
        fixes: list[tuple[str, str]] = []

        def fix(m: re.Match) -> str:
            tok = m.group(0)
            low = tok.casefold()
            if (len(low) < MIN_TYPO_LENGTH or low in self.forms or _stem(low) in self.df or _identifier_like(tok)
                    or low in STOPWORDS or low in NEGATIONS or low in QUANTIFIERS or low in UNITS or low in NUMBER_WORDS):
                return tok
            near = sorted(((self.forms[c], c) for c in _edits1(low) if c in self.forms and not _prefixed(c, low)),
                          reverse=True)
            if not near or (len(near) > 1 and near[0][0] < 2 * near[1][0]):
                return tok  # unknown, or two spellings about as likely: leave it
            fixes.append((low, near[0][1]))
            return near[0][1]

        out = _ALPHA.sub(fix, text)
        return out, fixes

    def idf(self, stem: str) -> float:
        """log(1 + N / df), 0..log(1 + N); an unseen word weighs the most."""
        d = self.df.get(stem, 0)
        return math.log(1 + self.docs / d) if d else self._top

    def to_json(self) -> dict:
        return {"docs": self.docs, "df": self.df, "forms": self.forms}

    @classmethod
    def from_json(cls, raw: dict) -> "Vocabulary":
        return cls(int(raw["docs"]), {str(k): int(v) for k, v in raw["df"].items()},
                   {str(k): int(v) for k, v in (raw.get("forms") or {}).items()})


@dataclass(frozen=True)
class Difference:
    """Why two questions are different questions (``family`` None: the same, as far as the rules can tell)."""

    family: Optional[str]
    words: tuple[str, ...]
    weight: float  # IDF-weighted content words that differ (matched synonyms excluded)
    matched: tuple = ()  # (word, word, similarity): differing words taken as near-synonyms

    @property
    def same(self) -> bool:
        return self.family is None

    def to_json(self) -> dict:
        out = {"family": self.family, "words": list(self.words), "weight": round(self.weight, 4)}
        if self.matched:
            out["matched"] = [[x, y, round(v, 3)] for x, y, v in self.matched]
        return out


def _dropped_one(long_: str, short: str) -> bool:
    """``short`` is ``long_`` with one inner letter dropped (a first letter dropped may be a prefix: a-synchronous)."""
    return len(long_) == len(short) + 1 and any(long_[:i] + long_[i + 1:] == short for i in range(1, len(long_)))


def _untypo(pa: Parsed, pb: Parsed, only_a: set, only_b: set) -> tuple[set, set]:
    """Forgive a typo: a long word on one side that is a word of the other with one letter dropped
    (never a substituted letter: affect/effect, form/from are different words)."""
    same = set()
    for x in only_a:
        for y in only_b:
            rx, ry = pa.raw.get(x, x), pb.raw.get(y, y)
            if min(len(rx), len(ry)) >= 6 and (_dropped_one(rx, ry) or _dropped_one(ry, rx)):
                same.add((x, y))
    return only_a - {x for x, _ in same}, only_b - {y for _, y in same}


def _synonyms(pa: Parsed, pb: Parsed, only_a: set, only_b: set, similar: Optional[Callable[[str, str], float]],
              floor: float) -> tuple[set, set, tuple]:
    """Match differing words one to one, most similar first, where ``similar`` finds them near-synonyms
    (never a word of two letters or fewer: vitamin D and vitamin C are not synonyms)."""
    if similar is None or floor > 1 or not only_a or not only_b:
        return only_a, only_b, ()
    pairs = []
    for x in only_a:
        for y in only_b:
            rx, ry = pa.raw.get(x, x), pb.raw.get(y, y)
            if min(len(rx), len(ry)) > 2:
                v = similar(rx, ry)
                if v >= floor:
                    pairs.append((v, x, y))
    matched = []
    for v, x, y in sorted(pairs, reverse=True):
        if x in only_a and y in only_b:
            only_a, only_b = only_a - {x}, only_b - {y}
            matched.append((pa.raw.get(x, x), pb.raw.get(y, y), float(v)))
    return only_a, only_b, tuple(matched)


def compare(a: str, b: str, vocab: Optional[Vocabulary], max_weight: float,
            similar: Optional[Callable[[str, str], float]] = None, min_word_similarity: float = 2.0) -> Difference:
    """The first rule the two questions differ by, or ``family=None`` when they may share an answer.

    ``similar`` (word, word) -> cosine, with ``min_word_similarity``, lets near-synonyms differ.
    """
    pa, pb = parse(a), parse(b)
    only_a, only_b = set(pa.words - pb.words), set(pb.words - pa.words)
    if pa.negations != pb.negations:
        return Difference("negation", (), 0.0)
    if pa.numbers != pb.numbers:
        return Difference("number", tuple(sorted(set(pa.numbers) ^ set(pb.numbers))), 0.0)
    if pa.operators != pb.operators:
        return Difference("operator", tuple(sorted(set(pa.operators) ^ set(pb.operators))), 0.0)
    if pa.quantifiers and pb.quantifiers and pa.quantifiers != pb.quantifiers:
        return Difference("quantifier", tuple(sorted(set(pa.quantifiers) ^ set(pb.quantifiers))), 0.0)
    if pa.units != pb.units:
        return Difference("unit", tuple(sorted(pa.units ^ pb.units)), 0.0)
    if pa.identifiers != pb.identifiers:
        return Difference("identifier", tuple(sorted(pa.identifiers ^ pb.identifiers)), 0.0)
    for x in only_a:
        for y in only_b:
            if _opposite(x, y):
                return Difference("antonym", (x, y), 0.0)
    shared = (set(pa.words) & set(pb.words)) | (pa.identifiers & pb.identifiers) | (pa.units & pb.units)
    if not _moved_clause(pa, pb, shared):
        swap = _swapped_across(pa, pb, shared)
        if swap is not None:  # arterioles than venules / venules than arterioles
            return Difference("order", swap, 0.0)
    only_a, only_b = _untypo(pa, pb, only_a, only_b)
    only_a, only_b, matched = _synonyms(pa, pb, only_a, only_b, similar, min_word_similarity)
    differ = only_a | only_b
    weight = sum(vocab.idf(w) if vocab else 1.0 for w in differ)
    if weight > max_weight:
        return Difference("content", tuple(sorted(differ)), weight, matched)
    return Difference(None, tuple(sorted(differ)), weight, matched)
