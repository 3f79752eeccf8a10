"""Build the grounded check's labelled set: answer sentences over the quickstart corpus and SciFact.

``python -m bench.grounded_set`` writes ``bench/data/grounded_labelled.jsonl``, one answer sentence a
line, with the passage an answer would cite for it::

    {"id", "corpus": "pydoc"|"scifact", "passage_id": "<corpus>:<doc>#<chunk>", "passage", "doc_id",
     "sentence", "label": "supported"|"unsupported", "kind", "rule"}

Passages are real chunks: the quickstart's (the Python language reference, chunked as
pipelines/quickstart.yaml chunks it) and SciFact abstracts chunked the same way. Seeded rules make
the sentences (``kind``):

- ``verbatim`` (supported): a sentence of the passage as it stands;
- ``reworded`` (supported): that sentence with words swapped for synonyms (``rule`` lists them);
- ``negated`` (unsupported): a sentence with its verb negated, or a negation removed;
- ``number_changed`` (unsupported): a sentence with one of its numbers changed;
- ``other_document`` (unsupported): a sentence of another document's passage;
- ``hand`` (either): paraphrases and false statements written by hand about a passage
  (``bench/data/grounded_hand.jsonl``: passage id, sentence, label, note).

A label is what the rule makes true by construction (a sentence of another document is taken to be
unsupported by this passage; the hand-written ones were read against the passage).
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "data" / "grounded_labelled.jsonl"
HAND = ROOT / "bench" / "data" / "grounded_hand.jsonl"
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
SEED = 25
PYDOC_PASSAGES = 40
SCIFACT_PASSAGES = 28

SYNONYMS = [
    ("returns", "gives back"), ("must", "has to"), ("called", "invoked"), ("contains", "holds"),
    ("specifies", "states"), ("allows", "lets"), ("However,", "But"), ("therefore", "so"),
    ("used", "employed"), ("creates", "makes"), ("the same", "an identical"), ("only", "solely"),
    ("whether", "if"), ("defined", "declared"), ("evaluated", "computed"), ("raised", "thrown"),
    ("increased", "rose"), ("decreased", "fell"), ("associated with", "linked to"), ("patients", "people"),
    ("significantly", "markedly"), ("showed", "found"), ("demonstrate", "show"), ("reduced", "lowered"),
    ("determine", "establish"), ("required", "needed"), ("several", "a number of"), ("large", "big"),
    ("identified", "found"), ("important", "key"), ("observed", "seen"), ("compared with", "relative to"),
]
NEGATIONS = [
    (" is not ", " is "), (" are not ", " are "), (" cannot ", " can "), (" does not ", " does "),
    (" do not ", " do "), (" is ", " is not "), (" are ", " are not "), (" can ", " cannot "),
    (" must ", " must not "), (" will ", " will not "), (" was ", " was not "), (" were ", " were not "),
    (" may ", " may not "), (" has ", " does not have "), (" have ", " do not have "),
]
NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w])")


def good_sentence(s: str) -> bool:
    """Prose, not code or a heading: long enough, mostly letters, ending like a sentence."""
    letters = sum(c.isalpha() or c == " " for c in s)
    return (len(s) >= 40 and len(s.split()) >= 7 and s[-1] in ".!?" and ">>>" not in s
            and letters / len(s) > 0.8 and not s.startswith(("*", "-", "|")))


def prose(passage: str) -> list[str]:
    from ragcost.guards.grounded import sentences

    body = passage.split("\n", 1)[1] if "\n" in passage else passage  # not the title line
    return [t for _, _, t in sentences(body, 40) if good_sentence(t)]


def reworded(s: str, rng: random.Random) -> tuple[str, list[str]] | None:
    out, used = s, []
    for a, b in rng.sample(SYNONYMS, len(SYNONYMS)):
        if re.search(rf"\b{re.escape(a)}\b", out):
            out = re.sub(rf"\b{re.escape(a)}\b", b, out, count=1)
            used.append(f"{a}->{b}")
        if len(used) == 2:
            break
    out = re.sub(r"\s*\([^()]{1,60}\)", "", out)  # a parenthesis dropped keeps the claim
    if out != s and used:
        return out, used + (["(...) dropped"] if "(" in s and "(" not in out else [])
    return None


def negated(s: str) -> tuple[str, str] | None:
    for a, b in NEGATIONS:
        if a in s:
            return s.replace(a, b, 1), f"{a.strip()}->{b.strip()}"
    return None


def number_changed(s: str) -> tuple[str, str] | None:
    m = NUMBER.search(s)
    if not m:
        return None
    old = m.group(1)
    new = str(float(old) * 2 + 1) if "." in old else str(int(old) * 2 + 3)
    return s[:m.start(1)] + new + s[m.end(1):], f"{old}->{new}"


def pydoc_passages() -> list[dict]:
    """The quickstart's chunks as ``ragcost index pipelines/quickstart.yaml`` stores them."""
    from pydoc_data.topics import topics

    from ragcost.records import SourceDocument

    chunker = _chunker()
    docs = [SourceDocument(id=k, title=k, text=topics[k]) for k in sorted(topics)]
    return [{"corpus": "pydoc", "doc_id": d.id, "passage_id": f"pydoc:{d.id}#{n}", "passage": c.text}
            for d, chunks in zip(docs, chunker.chunk_documents(docs)) for n, c in enumerate(chunks)]


def scifact_passages() -> list[dict]:
    from ragcost.records import SourceDocument

    docs = []
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            docs.append(SourceDocument(id=str(r["_id"]), title=r.get("title", ""), text=r.get("text", "")))
            if len(docs) >= 600:  # the first 600 abstracts are plenty to sample from
                break
    chunker = _chunker()
    return [{"corpus": "scifact", "doc_id": d.id, "passage_id": f"scifact:{d.id}#{n}", "passage": c.text}
            for d, chunks in zip(docs, chunker.chunk_documents(docs)) for n, c in enumerate(chunks)]


def _chunker():
    from ragcost.ingest.chunker import Chunker
    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(ROOT / "pipelines" / "quickstart.yaml")
    size, overlap = pipe.chunking()
    ch = pipe.config.chunking
    return Chunker(pipe.embedder.tokenizer, size, overlap, tail=ch.tail, min_tail=ch.min_tail, title=ch.title)


def items_for(pool: list[dict], n: int, rng: random.Random) -> list[dict]:
    usable = [p for p in pool if len(prose(p["passage"])) >= 3]
    chosen = rng.sample(usable, n)
    out = []
    for p in chosen:
        sents = prose(p["passage"])
        rng.shuffle(sents)
        base = {k: p[k] for k in ("corpus", "passage_id", "passage", "doc_id")}

        def add(sentence: str, label: str, kind: str, rule: str = "") -> None:
            out.append({**base, "sentence": sentence, "label": label, "kind": kind, "rule": rule})

        add(sents[0], "supported", "verbatim")
        for s in sents[1:]:
            r = reworded(s, rng)
            if r:
                add(r[0], "supported", "reworded", ", ".join(r[1]))
                break
        for s in sents[1:]:
            r = negated(s)
            if r:
                add(r[0], "unsupported", "negated", r[1])
                break
        for s in sents:
            r = number_changed(s)
            if r:
                add(r[0], "unsupported", "number_changed", r[1])
                break
        others = [q for q in pool if q["doc_id"] != p["doc_id"] and prose(q["passage"])]
        q = rng.choice(others)
        add(rng.choice(prose(q["passage"])), "unsupported", "other_document", f"from {q['passage_id']}")
    return out


def hand_items(pools: dict[str, dict]) -> list[dict]:
    if not HAND.is_file():
        return []
    out = []
    for line in HAND.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        h = json.loads(line)
        p = pools[h["passage_id"]]
        out.append({**{k: p[k] for k in ("corpus", "passage_id", "passage", "doc_id")}, "sentence": h["sentence"],
                    "label": h["label"], "kind": "hand", "rule": h.get("note", "")})
    return out


def main() -> None:
    rng = random.Random(SEED)
    pydoc, scifact = pydoc_passages(), scifact_passages()
    items = items_for(pydoc, PYDOC_PASSAGES, rng) + items_for(scifact, SCIFACT_PASSAGES, rng)
    items += hand_items({p["passage_id"]: p for p in pydoc + scifact})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as f:
        for i, it in enumerate(items):
            f.write(json.dumps({"id": f"g{i:03d}", **it}, ensure_ascii=False) + "\n")
    kinds: dict[str, int] = {}
    for it in items:
        kinds[f"{it['corpus']}/{it['kind']}/{it['label']}"] = kinds.get(f"{it['corpus']}/{it['kind']}/{it['label']}", 0) + 1
    print(json.dumps({"file": str(OUT.relative_to(ROOT)), "sentences": len(items), "by_kind": kinds}, indent=2))


if __name__ == "__main__":
    main()
