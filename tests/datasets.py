"""A fixed sample of SciFact for the suite's slow tests: every judged document and the hardest unjudged ones.

Embedding SciFact's 5,183 abstracts (9,920 chunks) once per fresh clone was a sixth of the suite's worker time
(373 s of 2,271 in fc26, issue 47). The tests that read it (the runtime's nDCG against torch float32's, tune
against eval, the judgments' power, the held-out judge) check claims about a ranking over real judgments, and
they keep that with 1,500 documents: all 283 the qrels judge, and for the rest, round-robin over the 300 queries,
each query's best-scoring unjudged documents under BM25 over title and text: the lexical near-misses a dense
retriever must rank below the judged ones, not random abstracts it never confuses. So the sample is harder per
document than the whole collection, and its nDCG is its own (tests/integration/test_scifact_flat.py measures it).

Written under ``.ragcost/data/`` (ignored, like the eval cache) from ``../shared/data/scifact`` at run time;
nothing of the data is committed. Deterministic: the same bytes on every machine (ties go to corpus order).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import shutil
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE_SIZE = 1500
SCIFACT_SAMPLE = f"scifact{SAMPLE_SIZE}"  # the folder's name: eval's cache files are named after it
_TOKEN = re.compile(r"[a-z0-9]+")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def _bm25_order(query: list[str], index: tuple, k1: float = 0.9, b: float = 0.4) -> list[int]:
    """Document indices by BM25 score for ``query``, best first (ties: corpus order); only those sharing a term."""
    postings, df, lengths, avg = index
    n = len(lengths)
    scores: dict[int, float] = defaultdict(float)
    for term in set(query):
        if term not in df:
            continue
        idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
        for i, tf in postings[term]:
            scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[i] / avg))
    return sorted(scores, key=lambda i: (-scores[i], i))


def sample_scifact(source: Path, target: Path, size: int = SAMPLE_SIZE) -> Path:
    """Write the sample of the BEIR folder ``source`` to ``target`` (atomically; an existing one is kept)."""
    if (target / "qrels.tsv").is_file():
        return target
    opener = gzip.open if (source / "corpus.jsonl.gz").is_file() else open
    corpus_file = source / "corpus.jsonl.gz" if opener is gzip.open else source / "corpus.jsonl"
    with opener(corpus_file, "rt", encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    rows = [json.loads(line) for line in lines]
    docs = [(str(r["_id"]), _tokens(f"{r.get('title', '')} {r.get('text', '')}")) for r in rows]
    qrels_lines = (source / "qrels.tsv").read_text(encoding="utf-8").splitlines()
    judged = {ln.split("\t")[1] for ln in qrels_lines[1:] if ln.strip()}
    queries = [json.loads(line) for line in (source / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]

    postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, (_, toks) in enumerate(docs):
        for term, tf in Counter(toks).items():
            postings[term].append((i, tf))
    df = {t: len(p) for t, p in postings.items()}
    lengths = [len(t) for _, t in docs]
    index = (postings, df, lengths, sum(lengths) / max(len(lengths), 1))
    ranked = [[i for i in _bm25_order(_tokens(q["text"]), index) if docs[i][0] not in judged]
              for q in queries]
    keep = {i for i, (d, _) in enumerate(docs) if d in judged}
    depth = 0
    while len(keep) < size and any(depth < len(r) for r in ranked):
        for r in ranked:
            if depth < len(r) and len(keep) < size:
                keep.add(r[depth])
        depth += 1

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    (tmp / "corpus.jsonl").write_text("".join(lines[i] if lines[i].endswith("\n") else lines[i] + "\n"
                                              for i in sorted(keep)), encoding="utf-8")
    shutil.copyfile(source / "queries.jsonl", tmp / "queries.jsonl")
    shutil.copyfile(source / "qrels.tsv", tmp / "qrels.tsv")  # every judged document is in the sample
    (tmp / "SOURCE.txt").write_text(
        f"A sample of {source.name} (../shared/data) written by tests/datasets.py: the {len(judged)} judged documents and the best "
        f"unjudged ones by BM25 per query, round-robin to {size} (depth {depth}).\n", encoding="utf-8")
    try:
        os.rename(tmp, target)  # another worker may have written it first: theirs is the same bytes
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def scifact_sample(shared_data: Path) -> Path:
    """The sample's folder (written on first use)."""
    return sample_scifact(shared_data / "scifact", REPO / ".ragcost" / "data" / SCIFACT_SAMPLE)


if __name__ == "__main__":  # python -m tests.datasets: write the sample and print its folder (for `ragcost eval`)
    from tests.conftest import SHARED_DATA

    print(scifact_sample(SHARED_DATA))
