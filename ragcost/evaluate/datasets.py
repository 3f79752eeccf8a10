"""BEIR-layout datasets: queries.jsonl and graded qrels.tsv (the corpus is read by the beir reader).

Qrels rows naming a query or document the dataset does not have are counted, shown by example
and skipped -- never silently dropped, never a crash. Queries are evaluated when they have at
least one relevant document (score >= 1), as BEIR does.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ragcost.errors import IngestError

CORPUS_NAMES = ("corpus.jsonl", "corpus.jsonl.gz")
EXAMPLES = 5


@dataclass
class QrelsProblems:
    """Qrels rows that were skipped, with a few examples each."""

    unknown_queries: int = 0
    unknown_query_examples: list[str] = field(default_factory=list)
    unknown_docs: int = 0
    unknown_doc_examples: list[str] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # "qrels.tsv:LINE: reason"
    no_relevant: int = 0  # judged queries without any document scored >= 1

    def lines(self) -> list[str]:
        """One warning line per kind of problem (empty when there were none)."""
        out = []
        if self.unknown_queries:
            out.append(f"{self.unknown_queries} qrels row(s) name queries not in queries.jsonl, skipped "
                       f"(e.g. {', '.join(self.unknown_query_examples)})")
        if self.unknown_docs:
            out.append(f"{self.unknown_docs} qrels row(s) name documents not in the indexed corpus, skipped "
                       f"(e.g. {', '.join(self.unknown_doc_examples)})")
        if self.malformed:
            out.append(f"{len(self.malformed)} malformed qrels line(s) skipped (e.g. {'; '.join(self.malformed[:3])})")
        if self.no_relevant:
            out.append(f"{self.no_relevant} judged quer(ies) have no document scored >= 1 and are not evaluated")
        return out


@dataclass
class Dataset:
    """A BEIR folder's queries and qrels, restricted to what can be evaluated."""

    name: str
    root: Path
    queries: dict[str, str]  # evaluated queries only, in file order
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> graded score
    problems: QrelsProblems


def corpus_path(root: Path) -> Path:
    """corpus.jsonl or corpus.jsonl.gz in ``root``, or an IngestError naming what is missing."""
    root = Path(root)
    if not root.is_dir():
        raise IngestError(f"dataset folder not found: {root}; check dataset: in the eval spec (relative to the spec file)")
    for n in CORPUS_NAMES:
        if (root / n).is_file():
            return root / n
    raise IngestError(f"dataset {root}: missing file corpus.jsonl (or corpus.jsonl.gz); a BEIR folder has corpus, queries.jsonl, qrels.tsv")


def check_files(root: Path | str) -> None:
    """Fail fast (before any embedding) when the folder lacks a corpus, queries or qrels."""
    corpus_path(Path(root))
    read_queries(Path(root))  # small; a malformed line or a repeated id is refused before the corpus is embedded
    _need(Path(root), "qrels.tsv")


def _need(root: Path, name: str) -> Path:
    p = Path(root) / name
    if not p.is_file():
        # BEIR's own layout keeps qrels in qrels/test.tsv: accept it, it is the same format
        alt = Path(root) / "qrels" / "test.tsv"
        if name == "qrels.tsv" and alt.is_file():
            return alt
        raise IngestError(f"dataset {root}: missing file {name}; a BEIR folder has corpus.jsonl, queries.jsonl, qrels.tsv")
    return p


def _lines(p: Path) -> Iterable[tuple[int, str]]:
    opener = gzip.open if p.name.endswith(".gz") else open
    try:
        with opener(p, "rt", encoding="utf-8") as f:
            for no, line in enumerate(f, start=1):
                yield no, line.rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise IngestError(f"{p}: not UTF-8 text ({e.reason}); save the file as UTF-8") from None


def read_queries(root: Path) -> dict[str, str]:
    """Query id -> text from queries.jsonl (``_id`` or ``id``, ``text``)."""
    p = _need(root, "queries.jsonl")
    out: dict[str, str] = {}
    first: dict[str, int] = {}  # id -> its line: a repeated id is refused (the last text would win silently)
    for no, line in _lines(p):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise IngestError(f"{p}:{no}: malformed JSON ({e.msg}); each line is {{\"_id\": ..., \"text\": ...}}") from None
        qid = rec.get("_id", rec.get("id")) if isinstance(rec, dict) else None
        if qid is None or not isinstance(rec.get("text"), str):
            raise IngestError(f"{p}:{no}: a query needs \"_id\" and \"text\"")
        qid = str(qid)
        if qid in first:
            raise IngestError(f"{p}:{no}: query id {qid!r} is used again (first at line {first[qid]}); give every "
                              "query its own id, or remove the repeated line")
        first[qid] = no
        out[qid] = rec["text"]
    return out


def read_qrels(root: Path, problems: QrelsProblems) -> dict[str, dict[str, int]]:
    """query id -> doc id -> score from qrels.tsv (header line; query-id, corpus-id, score)."""
    p = _need(root, "qrels.tsv")
    out: dict[str, dict[str, int]] = {}
    for no, line in _lines(p):
        if not line.strip():
            continue
        parts = line.split("\t")
        if no == 1 and not _is_int(parts[-1]):
            continue  # the header
        if len(parts) == 4:  # TREC style: qid, iteration, docid, score
            parts = [parts[0], parts[2], parts[3]]
        if len(parts) != 3 or not _is_int(parts[2]):
            problems.malformed.append(f"{p.name}:{no}: expected query-id<TAB>corpus-id<TAB>integer score")
            continue
        out.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return out


def _is_int(s: str) -> bool:
    try:
        int(s)
        return True
    except ValueError:
        return False


def load_dataset(root: Path | str, doc_ids: Iterable[str]) -> Dataset:
    """Queries and qrels of a BEIR folder, checked against the documents that were indexed."""
    root = Path(root)
    corpus_path(root)
    problems = QrelsProblems()
    queries = read_queries(root)
    raw = read_qrels(root, problems)
    known_docs = set(doc_ids)
    qrels: dict[str, dict[str, int]] = {}
    for qid, docs in raw.items():
        if qid not in queries:
            problems.unknown_queries += len(docs)
            if len(problems.unknown_query_examples) < EXAMPLES:
                problems.unknown_query_examples.append(qid)
            continue
        kept = {}
        for did, score in docs.items():
            if did in known_docs:
                kept[did] = score
            else:
                problems.unknown_docs += 1
                if len(problems.unknown_doc_examples) < EXAMPLES:
                    problems.unknown_doc_examples.append(f"{qid}->{did}")
        if any(s >= 1 for s in kept.values()):
            qrels[qid] = kept
        else:
            problems.no_relevant += 1
    if not qrels:
        raise IngestError(f"dataset {root}: no query has a relevant document (qrels score >= 1) in the corpus; check qrels.tsv")
    evaluated = {q: t for q, t in queries.items() if q in qrels}
    return Dataset(root.name, root, evaluated, qrels, problems)
