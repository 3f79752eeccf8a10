"""Build the semantic answer cache's rule-generated tuning set: labelled question pairs.

``python -m bench.cache_pairs_rules`` (run from the repository root) writes
``bench/data/cache_pairs_tune.jsonl``, one pair a line::

    {"corpus": "quickstart"|"scifact", "class": "paraphrase"|"near-miss"|"cross-language",
     "family": "<family>", "a": "<question>", "b": "<question>", "source": "rule:<family>"}

A cache that stored the answer to ``a`` should serve it for ``b`` when the class is ``paraphrase`` or
``cross-language``, and must not when it is ``near-miss``. Every label holds by construction: a
paraphrase rule only rewrites wording (the answer stays), a near-miss rule swaps one thing the answer
depends on. The rules are narrow on purpose; a rule that finds nothing to rewrite yields no pair.
This set is independent of the hand-made test set and of the cache's own matching rules. Stdlib
only; ``random.Random(44)`` makes every choice, so the output is the same on every run.

Sources
-------
- ``quickstart``: the Python language reference (``pydoc_data.topics``). The slot fillers below are
  real concepts of it, written as lists in this module: statements (``STATEMENTS``), special methods
  (``SPECIAL_METHODS``), builtin types (``TYPES``), operators (``OPERATORS``), topics
  (``HOW_TOPICS``, ``WHAT_TOPICS``). The topic texts are read only for a vocabulary, so that a typo
  never lands on a real word.
- ``scifact``: the claims of ``/work/shared/data/scifact/queries.jsonl`` (fields ``_id``, ``text``),
  read at run time; rules transform real claims, and ``a`` is always the claim as it stands.

Families, ``paraphrase`` (same answer)
--------------------------------------
- ``heavy`` (quickstart): one intent, two templates of very different wording (``HEAVY``: purpose of
  a statement, when a special method is called, what a type is, what an operator does).
- ``typo``: 1-2 seeded edits (swap two neighbours, drop, double, QWERTY-neighbour substitution), only
  on plain lowercase words of >= 5 letters outside code spans, never on a Python keyword, builtin,
  slot filler or (scifact) a word of the near-miss swap lists, never the first letter, and never
  giving a word of the vocabulary (topics text + claims + templates).
- ``order``: quickstart templates whose fronted clause moves to the end, or whose symmetric
  coordination ("the difference between X and Y") swaps (``ORDER``); scifact: "In X, Y." becomes
  "Y in X.", a final "in <organism>" (``ORGANISMS``) is fronted, "A and B are" becomes "B and A are".
- ``casual``: lowercase, drop ``?``/``.``/``,`` and backticks, add fillers (``CASUAL_PRE``,
  ``CASUAL_POST``: "hey", "quick question", "pls"...). Quickstart sources hold no operator symbols.
- ``synonym`` (quickstart): templates with a slot filled from one side of a pair of ``SYNONYMS``
  (make/create, remove/delete, error/exception, check/verify, get/obtain, change/modify, find/locate).
- ``request``: question <-> request forms (``REQUEST``: "How does X work?" <-> "Explain how X works."
  / "Can you tell me how X works?"...); scifact: claim -> "Is it true that <claim>?" etc.

Family ``translate-pt`` / ``translate-es`` (``cross-language``, quickstart)
---------------------------------------------------------------------------
Fixed English templates and their Portuguese and Spanish translations written here (``TRANSLATE``),
filled with the same concept; 5 pairs per language.

Families, ``near-miss`` (different answers)
-------------------------------------------
Quickstart near-misses come from ``NEAR_TEMPLATES``: a template with one slot, and pairs of slot
values whose answers differ (``a`` and ``b`` are the two fillings, their order chosen by the seed).
Scifact near-misses apply a swap rule to a claim (first match only, case kept, never on a word
joined by a hyphen to another):

- ``quantifier``: all/any, every/only the first; claims: ``QUANTIFIERS`` (All->Some, most->few,
  solely->partly, frequently->rarely, minority->majority...).
- ``comparative``: higher/lower precedence, largest/smallest; claims: ``COMPARATIVES``
  (higher<->lower, more<->less, larger<->smaller, better<->worse...).
- ``unit``: number bases, characters/bytes, decimal places/significant figures; claims: ``UNITS``
  (weeks<->months, hours->days, mg->g, nmol<->mmol, million->billion...).
- ``entity``: sibling statements/types (break/continue, list/tuple...); claims: ``ENTITIES``
  (mice<->rats, women<->men, breast<->prostate, ovaries<->testis...).
- ``direction``: convert A to B <-> B to A, left/right shift; claims: "from X to Y" -> "from Y to X",
  "into the nucleus" -> "out of the nucleus", "toward" -> "away from".
- ``scope``: module level/enclosing function, for loop/comprehension, class/instance attribute,
  in place/new list.
- ``ordering``: ascending/descending, first/last, start/end; claims: before<->after, early<->late.
- ``version``: a feature asked about in the Python release before and the one that added it.
- ``action``: add/remove, raise/catch, define/call, entered/exited, set/delete; claims: treat<->prevent.
- ``role``: which operand/argument/side (slice start/stop, dividend/divisor, subclass/parent class);
  claims: "X <verb>s Y." -> "Y <verb>s X." for a short X and Y and a regulation verb (``ROLE_VERBS``).
- ``negation``: a clause and its negation; claims: "not" inserted after the first is/are/can
  (can -> cannot), or "does not"/"do not" -> "does"/"do".
- ``antonym``: mutable/immutable, true/false, positive/negative; claims: ``ANTONYMS``
  (increases<->decreases, reduces->increases, promotes<->suppresses, high<->low...).
- ``number``: a different number in the template; claims: the first free-standing number before a
  unit or count word (``NUMBER_UNIT``) is changed (n -> 2n, 1 -> 3, a year -> year+10).
- ``operator``: a symbol operator against a keyword operator or another symbol named in words
  (pairs that only differ in symbols would vanish once punctuation is stripped).
- ``identifier``: method / special method names (``str.split``/``str.rsplit``, ``__str__``/``__repr__``).

Last, a pair is dropped when ``a`` and ``b`` are the same after lowercasing and stripping
punctuation, or when the same pair (either order) was already written.
"""

from __future__ import annotations

import builtins
import itertools
import json
import keyword
import random
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "data" / "cache_pairs_tune.jsonl"
SCIFACT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact" / "queries.jsonl"
SEED = 44

# How many pairs each family gets (at most; a family with fewer candidates gives what it has).
QUOTA_PARA_QS = {"heavy": 24, "typo": 18, "order": 14, "casual": 14, "synonym": 14, "request": 14}
QUOTA_PARA_SF = {"typo": 8, "casual": 8, "request": 8, "order": 7}
NEAR_TOTAL = 8  # per near-miss family, both corpora together
QUOTA_NEAR_SF = {"quantifier": 3, "comparative": 3, "unit": 2, "entity": 2, "direction": 1,
                 "ordering": 2, "action": 2, "role": 3, "negation": 3, "antonym": 3, "number": 3}

# --------------------------------------------------------------------------------------------
# Quickstart slot fillers: concepts of the Python language reference (pydoc_data.topics).
STATEMENTS = ["assert", "pass", "del", "return", "yield", "raise", "break", "continue", "import",
              "global", "nonlocal", "with", "try", "while", "for", "if"]
SPECIAL_METHODS = ["__init__", "__new__", "__del__", "__repr__", "__str__", "__bytes__", "__hash__",
                   "__bool__", "__getattr__", "__getattribute__", "__setattr__", "__len__",
                   "__contains__", "__iter__", "__enter__", "__exit__", "__call__", "__getitem__",
                   "__missing__", "__format__", "__index__", "__set_name__"]
TYPES = ["list", "tuple", "dict", "set", "frozenset", "bytes", "bytearray", "range", "memoryview",
         "complex", "float", "int", "str", "bool"]
OPERATORS = ["//", "%", "**", "@", "^", "~", "<<", ">>", "is", "not in", ":="]
HOW_TOPICS = ["the `with` statement", "the `try` statement", "attribute lookup", "slicing",
              "operator precedence", "comparison chaining", "augmented assignment",
              "the `import` statement", "the `yield` expression", "keyword argument passing",
              "the method resolution order", "exception chaining", "name resolution",
              "the `for` statement", "string formatting with f-strings", "the `global` statement"]
WHAT_TOPICS = ["a coroutine", "a context manager", "a descriptor", "a generator", "an iterator",
               "a decorator", "the Ellipsis object", "the `NotImplemented` object", "a code object",
               "a frozenset", "a lambda expression", "a bound method"]

# --- paraphrase: heavy ----------------------------------------------------------------------
HEAVY = [  # (fillers, templates of one intent)
    (STATEMENTS, ["What does the `{x}` statement do?", "What is the purpose of the `{x}` statement?",
                  "Explain what the `{x}` statement is for.", "What is the `{x}` statement used for?",
                  "What's the point of Python's `{x}` statement?"]),
    (SPECIAL_METHODS, ["When is `{x}` called?", "What triggers a call to `{x}`?",
                       "Under what circumstances does Python invoke `{x}`?",
                       "At what point does the interpreter call the `{x}` method?"]),
    (TYPES, ["What is a `{x}` in Python?", "How would you describe Python's `{x}` type?",
             "Can you define what the built-in `{x}` type is?", "Give me an overview of the `{x}` type."]),
    (OPERATORS, ["What does the `{x}` operator do?", "What is the effect of using `{x}` in an expression?",
                 "What operation does `{x}` perform?", "Describe the meaning of the `{x}` operator."]),
]

# --- paraphrase: order ----------------------------------------------------------------------
PAIRS_OF_CONCEPTS = [("a list", "a tuple"), ("`is`", "`==`"), ("`__str__`", "`__repr__`"),
                     ("`break`", "`continue`"), ("a set", "a frozenset"), ("`bytes`", "`bytearray`"),
                     ("`global`", "`nonlocal`"), ("`__getattr__`", "`__getattribute__`"),
                     ("an iterator", "an iterable"), ("`return`", "`yield`")]
ORDER = [  # (fillers, template a, template b); b has the same meaning, clause order changed
    (["for", "while", "try"], "In a `{x}` statement, when is the `else` clause executed?",
     "When is the `else` clause executed in a `{x}` statement?"),
    (["__eq__", "__hash__", "__repr__", "__len__"], "When subclassing, how do I override `{x}`?",
     "How do I override `{x}` when subclassing?"),
    (["list", "tuple", "set", "dict"], "For a `{x}`, how do I test membership?",
     "How do I test membership for a `{x}`?"),
    (["ValueError", "KeyError", "StopIteration"],
     "If a `{x}` is raised inside a `with` block, what happens to the context manager?",
     "What happens to the context manager if a `{x}` is raised inside a `with` block?"),
    (PAIRS_OF_CONCEPTS, "What is the difference between {x0} and {x1}?",
     "What is the difference between {x1} and {x0}?"),
    (PAIRS_OF_CONCEPTS, "How do {x0} and {x1} differ?", "How do {x1} and {x0} differ?"),
]

# --- paraphrase: casual ---------------------------------------------------------------------
CASUAL_SOURCES = [
    (STATEMENTS, "What does the `{x}` statement do?"),
    (SPECIAL_METHODS, "When is `{x}` called?"),
    (["list", "tuple", "dict", "set", "frozenset", "bytes"], "How do I copy a `{x}`?"),
    (HOW_TOPICS, "How does {x} work?"),
]
CASUAL_PRE = ["hey", "quick question", "hi", "so", "um", "hey quick question"]
CASUAL_POST = ["", "pls", "thanks", "thx", "please"]

# --- paraphrase: synonym --------------------------------------------------------------------
SYNONYMS = [("make", "create"), ("remove", "delete"), ("error", "exception"), ("check", "verify"),
            ("get", "obtain"), ("change", "modify"), ("find", "locate")]
SYNONYM_TEMPLATES = [  # (slot word of SYNONYMS, fillers, template with {s} the synonym slot)
    ("make", ["list", "tuple", "dict", "set", "class"], "How do I {s} an empty `{x}`?"),
    ("make", ["a copy of a list", "a generator function", "a subclass of `dict`"], "How do I {s} {x}?"),
    ("remove", ["a key from a dict", "an item from a list", "an element from a set",
                "an attribute from an object"], "How do I {s} {x}?"),
    ("error", ["a custom", "an"], "How do I raise {x} {s} in Python?"),
    ("error", ["`KeyboardInterrupt`", "a `ZeroDivisionError`"], "What {s} handler catches {x}?"),
    ("check", ["a list is empty", "an object is callable", "a key is in a dict",
               "a string starts with a prefix"], "How do I {s} whether {x}?"),
    ("get", ["the length of a list", "the type of an object", "the keys of a dict",
             "the last item of a tuple"], "How do I {s} {x}?"),
    ("change", ["an item in a list", "a global variable inside a function",
                "the value stored under a dict key"], "How do I {s} {x}?"),
    ("find", ["a substring in a string", "the index of an item in a list"], "How do I {s} {x}?"),
]

# --- paraphrase: request --------------------------------------------------------------------
REQUEST = [  # (fillers, question template, request templates)
    (HOW_TOPICS, "How does {x} work?",
     ["Explain how {x} works.", "Can you tell me how {x} works?", "Please describe how {x} works.",
      "I'd like to know how {x} works.", "Walk me through how {x} works."]),
    (WHAT_TOPICS, "What is {x}?",
     ["Tell me what {x} is.", "Could you explain what {x} is?", "Please explain what {x} is.",
      "I want to know what {x} is."]),
]

# --- cross-language -------------------------------------------------------------------------
ARTICLES = [("a list", "uma lista", "una lista"), ("a tuple", "uma tupla", "una tupla"),
            ("a dictionary", "um dicionário", "un diccionario"), ("a set", "um conjunto", "un conjunto")]
TRANSLATE = [  # (fillers (en, pt, es), English template, Portuguese, Spanish)
    ([(s, s, s) for s in ["pass", "yield", "break", "with", "del"]],
     "What does the `{x}` statement do?", "O que faz a instrução `{x}`?", "¿Qué hace la sentencia `{x}`?"),
    ([(m, m, m) for m in ["__init__", "__exit__", "__len__", "__repr__"]],
     "When is `{x}` called?", "Quando `{x}` é chamado?", "¿Cuándo se llama a `{x}`?"),
    (ARTICLES, "How do I create {x}?", "Como faço para criar {x}?", "¿Cómo creo {x}?"),
    ([(o, o, o) for o in ["//", "%", "**", "is"]],
     "What does the `{x}` operator do?", "O que faz o operador `{x}`?", "¿Qué hace el operador `{x}`?"),
    ([(s, s, s) for s in ["try", "for", "import", "global"]],
     "How does the `{x}` statement work?", "Como funciona a instrução `{x}`?",
     "¿Cómo funciona la sentencia `{x}`?"),
]

# --- near-miss templates (quickstart) -------------------------------------------------------
# family -> [(template with {v} the swapped slot and optional {x} a shared filler, [(v_a, v_b)], [x])]
NEAR_TEMPLATES: dict[str, list[tuple[str, list[tuple[str, str]], list[str]]]] = {
    "quantifier": [
        ("How do I check whether {v} of the items in a `{x}` are true?", [("all", "any")],
         ["list", "tuple", "set"]),
        ("How do I replace {v} occurrence of a substring in a string?", [("every", "only the first")], [""]),
        ("How do I split a string at {v} comma?", [("every", "only the first")], [""]),
        ("How do I remove {v} occurrence of a value from a list?", [("every", "only the first")], [""]),
    ],
    "comparative": [
        ("Which operator has {v} precedence, {x}?", [("higher", "lower")],
         ["`and` or `or`", "`*` or `+`", "`&` or `|`", "`not` or `==`"]),
        ("How do I find the {v} item in a `{x}`?", [("largest", "smallest")], ["list", "tuple"]),
        ("Which uses {v} memory, a `list` or a `tuple` of the same items?", [("more", "less")], [""]),
    ],
    "unit": [
        ("How do I convert an integer to {v} string?",
         [("a binary", "a hexadecimal"), ("an octal", "a binary"), ("a hexadecimal", "an octal")], [""]),
        ("How do I write an integer literal in {v}?", [("binary", "octal")], [""]),
        ("How do I parse {v} string into an integer?", [("a binary", "a hexadecimal")], [""]),
        ("How do I get the length of a string in {v}?", [("characters", "bytes")], [""]),
        ("How do I round a float to two {v}?", [("decimal places", "significant figures")], [""]),
    ],
    "entity": [
        ("What does the `{v}` statement do?", [("break", "continue"), ("global", "nonlocal"),
                                               ("return", "yield"), ("raise", "assert")], [""]),
        ("What is a {v} in Python?", [("list", "tuple"), ("set", "frozenset"), ("bytes object", "bytearray"),
                                      ("generator", "coroutine")], [""]),
    ],
    "direction": [
        ("How do I convert {v}?", [("a `str` to `bytes`", "`bytes` to a `str`"),
                                   ("a list to a tuple", "a tuple to a list"),
                                   ("a string to an integer", "an integer to a string"),
                                   ("an integer to a float", "a float to an integer"),
                                   ("a character to its Unicode code point", "a Unicode code point to its character")],
         [""]),
        ("What does the {v} shift operator do to an integer?", [("left", "right")], [""]),
        ("How do I convert {v}?", [("a dict to a list of key-value pairs",
                                    "a list of key-value pairs to a dict")], [""]),
    ],
    "scope": [
        ("How do I assign to a variable defined {v} from inside a nested function?",
         [("at module level", "in the enclosing function")], [""]),
        ("Is a name assigned inside {v} still visible after it ends?",
         [("a `for` loop", "a list comprehension"), ("an `if` block", "a function body")], [""]),
        ("How do I define {v} attribute?", [("a class", "an instance")], [""]),
        ("How do I sort a list {v}?", [("in place", "into a new list")], [""]),
        ("How do I reverse a list {v}?", [("in place", "into a new list")], [""]),
        ("How do I make a method receive the {v} as its first argument?", [("class", "instance")], [""]),
    ],
    "ordering": [
        ("How do I sort a `{x}` in {v} order?", [("ascending", "descending")], ["list", "tuple"]),
        ("How do I get the {v} three items of a list?", [("first", "last")], [""]),
        ("How do I remove the {v} item of a list?", [("first", "last")], [""]),
        ("How do I find the {v} occurrence of a substring in a string?", [("first", "last")], [""]),
        ("How do I strip whitespace from the {v} of a string?", [("start", "end")], [""]),
        ("How do I iterate over a list in {v} order?", [("forward", "reverse")], [""]),
    ],
    "version": [
        ("Does Python {v} support {x}?", [("3.5", "3.6")], ["f-strings"]),
        ("Does Python {v} support {x}?", [("3.7", "3.8")], ["the walrus operator `:=`", "positional-only parameters"]),
        ("Can I use {x} in Python {v}?", [("3.9", "3.10")], ["the `match` statement"]),
        ("Can I use {x} in Python {v}?", [("3.10", "3.11")], ["`except*` clauses"]),
        ("Does Python {v} support {x}?", [("3.8", "3.9")], ["the dict union operator `|`", "`str.removeprefix`"]),
        ("Are `async` and `await` reserved keywords in Python {v}?", [("3.6", "3.7")], [""]),
        ("Is `print` a statement in Python {v}?", [("2", "3")], [""]),
        ("Are dicts guaranteed to keep insertion order in Python {v}?", [("3.6", "3.7")], [""]),
    ],
    "action": [
        ("How do I {v} a `{x}`?", [("add an item to", "remove an item from")], ["list", "set"]),
        ("How do I {v} an exception?", [("raise", "catch")], [""]),
        ("How do I {v} a {x}?", [("define", "call")], ["function", "method"]),
        ("Which special method runs when a `with` block is {v}?", [("entered", "exited")], [""]),
        ("How do I {v} an attribute of an object by name?", [("set", "delete")], [""]),
        ("How do I {v} a file?", [("open", "close")], [""]),
    ],
    "role": [
        ("In `x[i:j]`, is the element at the {v} index included?", [("start", "stop")], [""]),
        ("In `a % b`, what sign does the result take when the {v} is negative?",
         [("dividend", "divisor")], [""]),
        ("In `isinstance(x, y)`, what kinds of values may the {v} argument be?", [("first", "second")], [""]),
        ("How does {v}?", [("a subclass call a method of its parent class",
                            "a parent class call a method of its subclass")], [""]),
        ("How can {v}?", [("a nested function rebind a variable of its enclosing function",
                           "an enclosing function rebind a variable of its nested function")], [""]),
        ("When `a + b` is evaluated, which special method is tried on the {v} operand?",
         [("left", "right")], [""]),
        ("In a conditional expression `x if c else y`, when is the operand {v} evaluated?",
         [("before `if`", "after `else`")], [""]),
    ],
    "negation": [
        ("When does the `else` clause of a `{x}` statement {v}?", [("run", "not run")],
         ["for", "while", "try"]),
        ("What does a function return if it {v} a `return` statement?", [("executes", "never executes")], [""]),
        ("What happens when a class defines `__eq__` and {v} `__hash__`?", [("also defines", "does not define")], [""]),
        ("What does `__exit__` receive when the `with` block {v} an exception?", [("raises", "does not raise")], [""]),
        ("What happens in a `for` loop with an `else` clause when the loop {v} `break`?",
         [("hits", "does not hit")], [""]),
    ],
    "antonym": [
        ("Can a {v} object be used as a dictionary key?", [("mutable", "immutable")], [""]),
        ("Which values are considered {v} in an `if` condition?", [("true", "false")], [""]),
        ("What does a {v} step in a slice do?", [("positive", "negative")], [""]),
        ("What does a {v} index into a list refer to?", [("positive", "negative")], [""]),
        ("What does `round()` do with a {v} `ndigits` argument?", [("positive", "negative")], [""]),
        ("How do I make an attribute name {v} in a class?", [("public", "private")], [""]),
    ],
    "number": [
        ("How do I round a float to {v} decimal places?", [("2", "3")], [""]),
        ("How do I get the first {v} items of a list?", [("3", "5")], [""]),
        ("How do I repeat a string {v} times?", [("3", "4")], [""]),
        ("What is `{v} // 2` in Python?", [("7", "9")], [""]),
        ("What does `x << {v}` do to an integer?", [("1", "2")], [""]),
        ("How do I pad a number with zeros to {v} digits?", [("4", "6")], [""]),
        ("What does `range({v})` produce?", [("5", "10")], [""]),
    ],
    "operator": [
        ("What does the {v} operator do?", [("`is`", "`==`"), ("`&`", "`and`"), ("`|`", "`or`"),
                                            ("`~`", "`not`"), ("`!=`", "`is not`")], [""]),
        ("What does {v} return for two integers?",
         [("the `/` (true division) operator", "the `//` (floor division) operator"),
          ("the `%` (modulo) operator", "the `//` (floor division) operator"),
          ("the `**` (power) operator", "the `*` (multiplication) operator")], [""]),
        ("Which special method implements the {v} operator?",
         [("`@` (matrix multiplication)", "`*` (multiplication)"), ("`in`", "`==`")], [""]),
    ],
    "identifier": [
        ("What does `{v}` do?", [("str.split", "str.rsplit"), ("list.append", "list.extend"),
                                 ("dict.get", "dict.setdefault"), ("str.partition", "str.split"),
                                 ("str.casefold", "str.lower")], [""]),
        ("What does `{v}` return when the substring is missing?", [("str.find", "str.index")], [""]),
        ("When does Python call `{v}`?", [("__getattr__", "__getattribute__"), ("__str__", "__repr__"),
                                          ("__init__", "__new__"), ("__len__", "__bool__")], [""]),
    ],
}
# --- scifact swap lists ---------------------------------------------------------------------
ANTONYMS = {"increases": "decreases", "decreases": "increases", "increase": "decrease",
            "decrease": "increase", "increased": "decreased", "decreased": "increased",
            "reduces": "increases", "reduce": "increase", "reduced": "increased",
            "promotes": "suppresses", "suppresses": "promotes", "improves": "worsens",
            "enhances": "impairs", "impairs": "enhances", "positive": "negative",
            "positively": "negatively", "inhibits": "activates", "activates": "inhibits",
            "raises": "lowers", "high": "low", "low": "high", "prevents": "promotes",
            "facilitates": "hinders", "strengthened": "weakened", "declines": "rises"}
COMPARATIVES = {"higher": "lower", "lower": "higher", "more": "less", "less": "more",
                "fewer": "more", "larger": "smaller", "smaller": "larger", "better": "worse",
                "poorer": "better", "faster": "slower", "slower": "faster", "greater": "less",
                "thinner": "thicker", "older": "younger"}
QUANTIFIERS = {"all": "some", "most": "few", "many": "few", "exclusively": "partly",
               "solely": "partly", "frequently": "rarely", "minority": "majority",
               "always": "never"}
QUANTIFIER_SKIP_AFTER = {"common", "frequent", "likely", "severe", "effective", "prevalent"}
UNITS = {"weeks": "months", "months": "weeks", "hours": "days", "years": "months", "mg": "g",
         "nmol": "mmol", "mmol": "nmol", "million": "billion"}
ENTITIES = {"mice": "rats", "rats": "mice", "mouse": "rat", "women": "men", "men": "women",
            "female": "male", "male": "female", "breast": "prostate", "prostate": "breast",
            "ovaries": "testis", "testis": "ovaries", "lungs": "kidneys", "zebrafish": "Drosophila",
            "Drosophila": "zebrafish", "yeasts": "bacteria"}
ORDERINGS = {"before": "after", "after": "before", "early": "late", "late": "early"}
ACTIONS = {"treat": "prevent", "treated": "prevented", "treating": "preventing", "prevent": "treat"}
ROLE_VERBS = ["inhibits", "activates", "suppresses", "promotes", "represses", "regulates",
              "induces", "enhances", "increases", "decreases", "reduces"]
ORGANISMS = ["mice", "rats", "yeasts", "bacteria", "Drosophila", "fruit flies", "Galliformes",
             "Passeriformes", "Bacillus subtilis", "Saccharomyces cerevisiae", "Bacillus subtilis cells",
             "India", "elderly patients"]
NUMBER_UNIT = re.compile(
    r"(?<![\w.,/\-$(])(\d{1,3}(?:,\d{3})+|\d+)(?=(%|mg\b|mmol\b| (?:weeks|years|hours|months|days|"
    r"percent|people|nmol|in|baise|million|times)\b))")
NUMBER_WORDS = {"two": "three", "three": "four", "six": "twelve", "ten": "twenty"}
NUMBER_WORD_UNIT = re.compile(r"\b(two|three|six|ten)(?= (?:months|weeks|years|percent|times|N-terminal)\b)")
REQUEST_SF = ["Is it true that {c}?", "Is there evidence that {c}?", "Does the evidence show that {c}?",
              "Tell me whether {c}.", "Can you check whether {c}?"]
CASUAL_SF_PRE = ["hey", "quick question", "so", "ok so", "hey quick q"]
CASUAL_SF_POST = ["", "?", " right?"]

# --------------------------------------------------------------------------------------------
NEIGHBOURS = {}
for _row in ("qwertyuiop", "asdfghjkl", "zxcvbnm"):
    for _i, _c in enumerate(_row):
        NEIGHBOURS[_c] = (_row[_i - 1] if _i else "") + (_row[_i + 1] if _i + 1 < len(_row) else "")


def norm(s: str) -> str:
    """Lowercase, punctuation stripped, spaces collapsed: what makes two questions 'identical'."""
    return " ".join(re.sub(r"[^\w\s]", " ", s.lower()).split())


def load_claims() -> list[dict]:
    with SCIFACT.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def vocabulary(claims: list[dict]) -> set[str]:
    import pydoc_data.topics as t

    text = " ".join(t.topics.values()) + " " + " ".join(c["text"] for c in claims)
    return {w.lower() for w in re.findall(r"[A-Za-z]+", text)}


def protected_words() -> set[str]:
    words = set(keyword.kwlist) | {w.lower() for w in dir(builtins)}
    for group in (STATEMENTS, TYPES, HOW_TOPICS, WHAT_TOPICS):
        for item in group:
            words |= {w.lower() for w in re.findall(r"[A-Za-z]+", item)}
    for table in (ANTONYMS, COMPARATIVES, QUANTIFIERS, UNITS, ENTITIES, ORDERINGS, ACTIONS):
        words |= {w.lower() for kv in table.items() for w in kv}
    words |= {"not", "never", "cannot"}
    return words


# --- typo -----------------------------------------------------------------------------------
def typo_word(word: str, rng: random.Random, vocab: set[str]) -> str | None:
    for _ in range(12):
        op = rng.choice(["swap", "drop", "double", "neighbour"])
        i = rng.randrange(1, len(word) - 1) if op == "swap" else rng.randrange(1, len(word))
        if op == "swap":
            if word[i] == word[i + 1]:
                continue
            new = word[:i] + word[i + 1] + word[i] + word[i + 2:]
        elif op == "drop":
            new = word[:i] + word[i + 1:]
        elif op == "double":
            new = word[:i + 1] + word[i] + word[i + 1:]
        else:
            if not NEIGHBOURS.get(word[i]):
                continue
            new = word[:i] + rng.choice(NEIGHBOURS[word[i]]) + word[i + 1:]
        if new.lower() not in vocab and new != word:
            return new
    return None


def typo(text: str, rng: random.Random, vocab: set[str], protected: set[str]) -> str | None:
    """1-2 typos on plain lowercase words (>= 5 letters) outside `code` spans; None if none fit."""
    spans = []  # (start, end) of eligible words
    for m in re.finditer(r"`[^`]*`|\b[a-z]{5,}\b", text):
        w = m.group()
        if not w.startswith("`") and w not in protected:
            spans.append((m.start(), m.end()))
    if not spans:
        return None
    k = min(len(spans), rng.choice([1, 1, 2]))
    chosen = sorted(rng.sample(spans, k), reverse=True)
    out = text
    for s, e in chosen:
        new = typo_word(out[s:e], rng, vocab)
        if new is None:
            return None
        out = out[:s] + new + out[e:]
    return out


# --- casual ---------------------------------------------------------------------------------
def casualise(text: str, rng: random.Random, pre: list[str], post: list[str]) -> str:
    body = re.sub(r"[`?.,]", "", text).strip()
    body = body[0].lower() + body[1:]
    p, q = rng.choice(pre), rng.choice(post)
    out = f"{p} {body}".strip()
    if q:
        out = out + q if q.startswith(("?", " ")) else f"{out} {q}"
    return out


# --- helpers for claims ---------------------------------------------------------------------
def first_word_plain(s: str) -> bool:
    """True when the first word is an ordinary capitalised word (safe to lowercase)."""
    w = s.split()[0]
    return w.isalpha() and w[:1].isupper() and (w[1:].islower() or len(w) == 1)


def lower_first(s: str) -> str:
    return s[0].lower() + s[1:] if first_word_plain(s) else s


def upper_first(s: str) -> str:
    w = s.split()[0]
    if w.islower() and w.isalpha():
        return s[0].upper() + s[1:]
    return s


def swap_word(text: str, table: dict[str, str], skip_after: set[str] | None = None) -> str | None:
    """Swap the first word of ``table`` found (whole word, not joined by a hyphen), keeping case."""
    for m in re.finditer(r"(?<![\w-])([A-Za-z]+)(?![\w-])", text):
        w = m.group(1)
        key = w if w in table else w.lower() if w.lower() in table else None
        if key is None:
            continue
        if skip_after:
            nxt = re.match(r"\s+([A-Za-z]+)", text[m.end():])
            if nxt and nxt.group(1).lower() in skip_after:
                continue
        new = table[key]
        if w[0].isupper() and key == w.lower():
            new = new[0].upper() + new[1:]
        return text[:m.start()] + new + text[m.end():]
    return None


def strip_end(c: str) -> str:
    return c.rstrip().rstrip(".").rstrip()


# --- scifact paraphrase rules ---------------------------------------------------------------
def sf_order(c: str) -> str | None:
    body = strip_end(c)
    m = re.match(r"^In ([^,]{3,40}), (.+)$", body)
    if m:
        return f"{upper_first(m.group(2))} in {m.group(1)}."
    for org in sorted(ORGANISMS, key=len, reverse=True):
        if body.endswith(f" in {org}") and "," not in body:
            rest = body[: -len(f" in {org}")]
            return f"In {org}, {lower_first(rest)}."
    m = re.match(r"^([A-Z][a-z]+) and ([a-z]+) (are|is) (.+)$", body)
    if m:
        return f"{m.group(2).capitalize()} and {m.group(1).lower()} {m.group(3)} {m.group(4)}."
    return None


def sf_request(c: str, rng: random.Random) -> str:
    return rng.choice(REQUEST_SF).format(c=lower_first(strip_end(c)))


# --- scifact near-miss rules ----------------------------------------------------------------
def sf_negation(c: str) -> str | None:
    m = re.search(r"\b(does|do|did) not ", c)
    if m:
        return c[:m.start()] + m.group(1) + " " + c[m.end():]
    m = re.search(r" (is|are|can) (?!not\b|no\b)", c)
    if m:
        neg = "cannot" if m.group(1) == "can" else f"{m.group(1)} not"
        return c[:m.start()] + f" {neg} " + c[m.end():]
    return None


def sf_role(c: str) -> str | None:
    body = strip_end(c)
    verbs = "|".join(ROLE_VERBS)
    m = re.match(rf"^([^,()]+?) ({verbs}) ([^,()]+)$", body)
    if not m:
        return None
    x, v, y = m.groups()
    if not (1 <= len(x.split()) <= 5 and 1 <= len(y.split()) <= 5):
        return None
    if re.search(r"\b(by|in|with|to|that|which)\b", y):
        return None
    return f"{upper_first(y)} {v} {lower_first(x)}."


def sf_direction(c: str) -> str | None:
    m = re.search(r"\bfrom ((?:the )?[\w\- ]+?) to ((?:the )?[\w\- ]+?)(?= during| of the|\.|$)", c)
    if m:
        return c[:m.start()] + f"from {m.group(2)} to {m.group(1)}" + c[m.end():]
    for a, b in (("into the nucleus", "out of the nucleus"), (" toward ", " away from ")):
        if a in c:
            return c.replace(a, b, 1)
    return None


def sf_number(c: str) -> str | None:
    m = NUMBER_UNIT.search(c)
    if m:
        raw = m.group(1)
        n = int(raw.replace(",", ""))
        if n == 0:
            return None
        new = n + 10 if 1900 <= n <= 2030 else 3 if n == 1 else 2 * n
        new_s = f"{new:,}" if "," in raw else str(new)
        return c[:m.start(1)] + new_s + c[m.end(1):]
    m = NUMBER_WORD_UNIT.search(c)
    if m:
        return c[:m.start()] + NUMBER_WORDS[m.group(1)] + c[m.end():]
    return None


def sf_unit(c: str) -> str | None:
    m = re.search(r"(?<=\d)(mg|mmol)\b|(?<=\d )(weeks|months|hours|years|nmol|million)\b|"
                  r"(?<=\b(?:six|two|ten) )(months|weeks|years)\b", c)
    if not m:
        return None
    u = m.group()
    return c[:m.start()] + UNITS[u] + c[m.end():]


SF_NEAR_RULES = {
    "quantifier": lambda c: swap_word(c, QUANTIFIERS, QUANTIFIER_SKIP_AFTER),
    "comparative": lambda c: swap_word(c, COMPARATIVES),
    "unit": sf_unit,
    "entity": lambda c: swap_word(c, ENTITIES),
    "direction": sf_direction,
    "ordering": lambda c: swap_word(c, ORDERINGS),
    "action": lambda c: swap_word(c, ACTIONS),
    "role": sf_role,
    "negation": sf_negation,
    "antonym": lambda c: swap_word(c, ANTONYMS),
    "number": sf_number,
}


# --------------------------------------------------------------------------------------------
def fill(template: str, x) -> str:
    if isinstance(x, tuple):
        return template.format(x0=x[0], x1=x[1])
    return template.format(x=x)


def quickstart_question_pool() -> list[str]:
    """Template questions (no operator symbols) that typo rules may edit."""
    pool = []
    for fillers, templates in HEAVY[:3]:
        for x in fillers:
            pool += [fill(t, x) for t in templates]
    for fillers, q, reqs in REQUEST:
        pool += [fill(q, x) for x in fillers]
    return pool


class Writer:
    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.seen: set[tuple[str, str]] = set()

    def add(self, corpus: str, cls: str, family: str, a: str, b: str) -> bool:
        na, nb = norm(a), norm(b)
        if na == nb or (na, nb) in self.seen:
            return False
        self.seen |= {(na, nb), (nb, na)}
        self.rows.append({"corpus": corpus, "class": cls, "family": family, "a": a, "b": b,
                          "source": f"rule:{family}"})
        return True


def take(w: Writer, rng: random.Random, corpus: str, cls: str, family: str,
         cands: list[tuple[str, str]], n: int) -> int:
    cands = list(cands)
    rng.shuffle(cands)
    got = 0
    for a, b in cands:
        if got >= n:
            break
        got += w.add(corpus, cls, family, a, b)
    return got


def build() -> list[dict]:
    rng = random.Random(SEED)
    claims = load_claims()
    vocab = vocabulary(claims)
    protected = protected_words()
    for _, _, tmpl in SYNONYM_TEMPLATES:
        vocab |= {w.lower() for w in re.findall(r"[A-Za-z]+", tmpl)}
    w = Writer()

    # ---------------- quickstart paraphrases
    cands = []
    for fillers, templates in HEAVY:
        for x in fillers:
            cands += [(fill(t1, x), fill(t2, x)) for t1, t2 in itertools.combinations(templates, 2)]
    # one pair per concept at most, so the family spreads over many concepts
    rng.shuffle(cands)
    by_q: dict[str, tuple[str, str]] = {}
    for a, b in cands:
        key = re.search(r"`[^`]+`", a).group()
        by_q.setdefault(key, (a, b))
    take(w, rng, "quickstart", "paraphrase", "heavy", list(by_q.values()), QUOTA_PARA_QS["heavy"])

    pool = quickstart_question_pool()
    rng.shuffle(pool)
    cands = []
    for q in pool:
        t = typo(q, rng, vocab, protected)
        if t:
            cands.append((q, t))
    take(w, rng, "quickstart", "paraphrase", "typo", cands, QUOTA_PARA_QS["typo"])

    cands = [(fill(ta, x), fill(tb, x)) for fillers, ta, tb in ORDER for x in fillers]
    take(w, rng, "quickstart", "paraphrase", "order", cands, QUOTA_PARA_QS["order"])

    cands = []
    for fillers, t in CASUAL_SOURCES:
        for x in fillers:
            q = fill(t, x)
            cands.append((q, casualise(q, rng, CASUAL_PRE, CASUAL_POST)))
    take(w, rng, "quickstart", "paraphrase", "casual", cands, QUOTA_PARA_QS["casual"])

    cands = []
    for slot, fillers, t in SYNONYM_TEMPLATES:
        other = dict(SYNONYMS)[slot]
        for x in fillers:
            a, b = t.format(s=slot, x=x), t.format(s=other, x=x)
            cands.append((a, b) if rng.random() < 0.5 else (b, a))
    take(w, rng, "quickstart", "paraphrase", "synonym", cands, QUOTA_PARA_QS["synonym"])

    cands = []
    for fillers, q, reqs in REQUEST:
        for x in fillers:
            cands.append((fill(q, x), fill(rng.choice(reqs), x)))
    take(w, rng, "quickstart", "paraphrase", "request", cands, QUOTA_PARA_QS["request"])

    # ---------------- scifact paraphrases
    texts = [c["text"].strip() for c in claims]
    cands = []
    for c in texts:
        t = typo(c, rng, vocab, protected)
        if t:
            cands.append((c, t))
    take(w, rng, "scifact", "paraphrase", "typo", cands, QUOTA_PARA_SF["typo"])
    cands = [(c, casualise(strip_end(c), rng, CASUAL_SF_PRE, CASUAL_SF_POST)) for c in texts]
    take(w, rng, "scifact", "paraphrase", "casual", cands, QUOTA_PARA_SF["casual"])
    cands = [(c, sf_request(c, rng)) for c in texts]
    take(w, rng, "scifact", "paraphrase", "request", cands, QUOTA_PARA_SF["request"])
    cands = [(c, o) for c in texts if (o := sf_order(c))]
    take(w, rng, "scifact", "paraphrase", "order", cands, QUOTA_PARA_SF["order"])

    # ---------------- cross-language (quickstart): 5 Portuguese, 5 Spanish, one per template
    for lang, col in (("pt", 1), ("es", 2)):
        for fillers, en, pt, es in TRANSLATE:
            f = rng.choice(fillers)
            tgt = (pt, es)[col - 1]
            w.add("quickstart", "cross-language", f"translate-{lang}", en.format(x=f[0]), tgt.format(x=f[col]))

    # ---------------- near-misses
    for family, templates in NEAR_TEMPLATES.items():
        sf_n = 0
        if family in SF_NEAR_RULES:
            rule = SF_NEAR_RULES[family]
            cands = [(c, o) for c in texts if (o := rule(c)) and o != c]
            sf_n = take(w, rng, "scifact", "near-miss", family, cands, QUOTA_NEAR_SF[family])
        cands = []
        for t, swaps, fillers in templates:
            for (va, vb), x in itertools.product(swaps, fillers):
                a, b = t.format(v=va, x=x), t.format(v=vb, x=x)
                cands.append((a, b) if rng.random() < 0.5 else (b, a))
        take(w, rng, "quickstart", "near-miss", family, cands, NEAR_TOTAL - sf_n)
    return w.rows


def main() -> None:
    rows = build()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = Counter((r["class"], r["family"], r["corpus"]) for r in rows)
    for key in sorted(counts):
        print(*key, counts[key], sep="\t")
    print("total", len(rows), "quickstart", sum(r["corpus"] == "quickstart" for r in rows), sep="\t")


if __name__ == "__main__":
    main()
