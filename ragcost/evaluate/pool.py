"""Judgments for a team that has none: pool every configuration's top k into one file a person fills in.

``ragcost judgments pool SPEC`` runs each configuration of an eval spec's grid (every embedder,
chunking, index, search setting and re-rank entry) over *all* the dataset's questions, judged or
not, and writes the union of their top-k documents per question (the TREC pooling method) to a
TSV a person opens in any spreadsheet:

    query_id  doc_id  relevance  judge  judged_at  query  title  passage  found_by

``relevance`` is left empty for the person to fill (0 not relevant, 1 relevant, 2 highly
relevant, 3 perfect: the graded scale BEIR's qrels use); pairs the dataset already judges come
filled with their score and ``judge`` ``qrels.tsv``. Within a question the documents are in a
seeded random order, not by rank, so the judge is not told which configuration liked which
document. ``found_by`` is how many configurations retrieved it (for triage, at the end of the row).

``ragcost judgments merge SPEC FILE`` reads the filled rows back: each filled ``relevance`` goes
into the dataset's ``qrels.tsv`` (a pair already there takes the new score, and the change is
counted), and every judgment, with who made it (``judge``, or ``--judge NAME`` for empty cells)
and when, is appended to ``judgments.tsv`` beside it: who judged what is kept, never overwritten.

Each configuration's **judged@k** (the share of its top-k documents that carry a judgment, 0
included) is printed by both commands and by eval; eval's verdict says when documents nobody
judged could reverse its comparison (:func:`ragcost.evaluate.verdict.unjudged_note`).
"""

from __future__ import annotations

import csv
import io
import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from ragcost.errors import ConfigError, IngestError
from ragcost.evaluate.metrics import judged_at  # noqa: F401  (judged@k: here for `ragcost judgments pool`)

COLUMNS = ["query_id", "doc_id", "relevance", "judge", "judged_at", "query", "title", "passage", "found_by"]
GRADES = (0, 1, 2, 3)
PASSAGE_CHARS = 1200  # enough of a document to judge it from; the whole text is in the corpus
QRELS_JUDGE = "qrels.tsv"
LOG_NAME = "judgments.tsv"
LOG_COLUMNS = ["query_id", "doc_id", "relevance", "judge", "judged_at", "source"]

Progress = Callable[[str, int, Optional[int]], None]


def _noop(task: str, done: int, total: Optional[int]) -> None:
    pass


@dataclass
class Pool:
    """What ``pool`` found: per question the pooled documents, and per configuration its top k."""

    k: int
    queries: dict[str, str]
    docs: dict[str, dict[str, int]]  # query -> doc -> how many configurations retrieved it in their top k
    tops: dict[str, dict[str, list[str]]]  # configuration -> query -> its top k
    skipped: list[str] = field(default_factory=list)  # configurations that could not run, with why

    @property
    def pairs(self) -> int:
        return sum(len(d) for d in self.docs.values())


def qrels_path(root: Path) -> Path:
    """Where the dataset keeps its qrels (BEIR's qrels/test.tsv when that is the one there), else qrels.tsv."""
    alt = root / "qrels" / "test.tsv"
    return alt if not (root / "qrels.tsv").is_file() and alt.is_file() else root / "qrels.tsv"


def read_existing(root: Path) -> dict[str, dict[str, int]]:
    from ragcost.evaluate.datasets import QrelsProblems, read_qrels

    return read_qrels(root, QrelsProblems()) if qrels_path(root).is_file() else {}


def pool(ls: Any, cache_dir: Path, k: Optional[int] = None, progress: Progress = _noop) -> Pool:
    """Every grid configuration's top ``k`` (default: the spec's first k) for every question of the dataset."""
    from ragcost.evaluate.datasets import corpus_path, read_queries
    from ragcost.evaluate.grid import close_variants, prefixed, variants
    from ragcost.evaluate.run import rank_all, evaluator
    from ragcost.evaluate.spec import expand
    from ragcost.evaluate.vectors import embed_corpus, embed_queries
    from ragcost.runtime.pipeline import Pipeline

    root = ls.dataset_path
    corpus_path(root)
    queries = read_queries(root)
    if not queries:
        raise IngestError(f"{root / 'queries.jsonl'}: no questions; write one {{\"_id\": ..., \"text\": ...}} per line")
    k = int(k or ls.spec.k[0])
    pipe = Pipeline.load(ls.pipeline_path, judge=False)
    out = Pool(k, queries, {q: {} for q in queries}, {})
    vs = []
    try:
        vs = variants(ls.spec, pipe)
        for v in vs:
            progress("loading model", 0, None)
            v.pipe.embedder.warm_up()
            corpus = embed_corpus(v.pipe, root, cache_dir, progress=lambda d, t: progress("embedding corpus", d, t))
            qv = embed_queries(v.pipe, queries, root, cache_dir)
            native = int(corpus.vectors.shape[1])
            candidates, skipped = expand(ls, native, min(v.pipe.dim, native))
            out.skipped += [f"{prefixed(v.label, s.name)}: {s.reason}" for s in skipped]
            ev = evaluator(ls, v.pipe, corpus, qv, queries)
            groups: dict[tuple, list] = {}
            for c in candidates:
                groups.setdefault(c.build_key, []).append(c)
            done = 0
            for group in groups.values():
                try:
                    index, _ = ev.build(group[0])
                except Exception as e:  # noqa: BLE001  (one build failing leaves the rest of the pool)
                    out.skipped += [f"{prefixed(v.label, c.name)}: build failed: {e}" for c in group]
                    continue
                for c in group:
                    progress("pooling configurations", done, len(candidates))
                    tops = rank_all(ev, c, index, k)
                    out.tops[prefixed(v.label, c.name)] = tops
                    for q, docs in tops.items():
                        for d in docs:
                            out.docs[q][d] = out.docs[q].get(d, 0) + 1
                    done += 1
                del index
    finally:
        close_variants(vs, pipe)
    if not out.tops:
        raise ConfigError(f"{ls.path}: no configuration of the grid could run ({'; '.join(out.skipped[:3])}), so nothing was pooled")
    return out


def _corpus_texts(root: Path, wanted: set[str]) -> dict[str, tuple[str, str]]:
    """doc id -> (title, text) for the pooled documents, read from the BEIR corpus."""
    import gzip

    from ragcost.evaluate.datasets import corpus_path

    p = corpus_path(root)
    opener = gzip.open if p.name.endswith(".gz") else open
    out: dict[str, tuple[str, str]] = {}
    with opener(p, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            did = str(rec.get("_id", rec.get("id")))
            if did in wanted:
                out[did] = (str(rec.get("title") or ""), str(rec.get("text") or ""))
    return out


def _write(path: Path, text: str, what: str) -> None:
    """Atomically: an existing file is edited in place (its mode kept), a new one renamed into place."""
    import os

    from ragcost.atomic import replace_text

    if path.exists():
        replace_text(path, text, what=what)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _cell(s: str, limit: Optional[int] = None) -> str:
    s = " ".join(str(s).split())  # tabs and newlines would break the row
    return s if limit is None or len(s) <= limit else s[: limit - 1] + "…"


def write_pool(p: Pool, root: Path, path: Path, seed: int = 0) -> int:
    """The judging file; returns how many pairs are left to judge."""
    existing = read_existing(root)
    texts = _corpus_texts(root, {d for docs in p.docs.values() for d in docs})
    rng = random.Random(seed)
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    w.writerow(COLUMNS)
    todo = 0
    for q, text in p.queries.items():
        docs = sorted(p.docs[q])
        rng.shuffle(docs)  # not by rank: the judge is not told which configuration liked which document
        for d in docs:
            title, body = texts.get(d, ("", ""))
            known = existing.get(q, {}).get(d)
            todo += known is None
            w.writerow([q, d, "" if known is None else known, "" if known is None else QRELS_JUDGE, "", _cell(text),
                        _cell(title), _cell(body, PASSAGE_CHARS), p.docs[q][d]])
    _write(path, buf.getvalue(), "judgments pool -o")
    return todo


@dataclass
class Merged:
    added: int = 0  # new (query, doc) judgments in qrels
    changed: int = 0  # pairs qrels had, with another score now
    unchanged: int = 0
    empty: int = 0  # rows nobody judged yet
    judges: dict[str, int] = field(default_factory=dict)
    qrels: Path = Path()
    log: Path = Path()


def read_filled(path: Path, known_queries: set[str], default_judge: Optional[str]) -> tuple[list[dict[str, Any]], int]:
    """The judged rows of a pool file (each checked; a bad cell is one line naming file:line), and the empty ones."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such judging file; make one with `ragcost judgments pool SPEC -o {path}`")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's UTF-8 export may start with a BOM
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason}); save it as UTF-8 tab-separated text") from None
    rows = list(csv.reader(io.StringIO(text), delimiter="\t"))
    if not rows or [h.strip() for h in rows[0][:3]] != COLUMNS[:3]:
        raise ConfigError(f"{path}:1: expected the header {chr(9).join(COLUMNS)} (a file written by "
                          "`ragcost judgments pool`, saved as tab-separated text)")
    head = [h.strip() for h in rows[0]]
    col = {h: i for i, h in enumerate(head)}
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    filled, empty = [], 0
    for no, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        get = lambda name: row[col[name]].strip() if name in col and col[name] < len(row) else ""  # noqa: E731
        q, d, rel = get("query_id"), get("doc_id"), get("relevance")
        if not q or not d:
            raise ConfigError(f"{path}:{no}: a row needs query_id and doc_id (the pool wrote both; was a column moved?)")
        if q not in known_queries:
            raise ConfigError(f"{path}:{no}: query_id {q!r} is not in the dataset's queries.jsonl; judge the pool of this dataset")
        if rel == "":
            empty += 1
            continue
        if rel not in {str(g) for g in GRADES}:
            raise ConfigError(f"{path}:{no}: relevance {rel!r}: give 0 (not relevant), 1 (relevant), 2 (highly relevant) "
                              "or 3 (perfect), or leave it empty (not judged yet)")
        judge = get("judge") or default_judge
        if not judge:
            raise ConfigError(f"{path}:{no}: relevance {rel} has no judge; fill the judge column (who judged it) or "
                              "pass --judge NAME for the rows that leave it empty")
        filled.append({"query_id": q, "doc_id": d, "relevance": int(rel), "judge": judge,
                       "judged_at": get("judged_at") or now})
    return filled, empty


def merge(root: Path, path: Path, default_judge: Optional[str] = None) -> Merged:
    """Write a filled pool's judgments into the dataset's qrels and its judgments log (nothing written on a bad row)."""
    from ragcost.evaluate.datasets import read_queries

    filled, empty = read_filled(path, set(read_queries(root)), default_judge)
    qpath = qrels_path(root)
    qrels = read_existing(root)
    m = Merged(empty=empty, qrels=qpath, log=root / LOG_NAME)
    new_log = []
    for r in filled:
        old = qrels.get(r["query_id"], {}).get(r["doc_id"])
        if r["judge"] == QRELS_JUDGE and old == r["relevance"]:
            m.unchanged += 1  # the pool's pre-filled judgment, untouched
            continue
        if old is None:
            m.added += 1
        elif old != r["relevance"]:
            m.changed += 1
        else:
            m.unchanged += 1
        qrels.setdefault(r["query_id"], {})[r["doc_id"]] = r["relevance"]
        m.judges[r["judge"]] = m.judges.get(r["judge"], 0) + 1
        new_log.append([r["query_id"], r["doc_id"], r["relevance"], _cell(r["judge"]), r["judged_at"], path.name])
    out = io.StringIO()
    out.write("query-id\tcorpus-id\tscore\n")
    for q, docs in qrels.items():
        for d, s in docs.items():
            out.write(f"{q}\t{d}\t{s}\n")
    log = io.StringIO()
    w = csv.writer(log, delimiter="\t", lineterminator="\n")
    if not m.log.is_file():
        w.writerow(LOG_COLUMNS)
    w.writerows(new_log)
    if new_log:
        prev = m.log.read_text(encoding="utf-8") if m.log.is_file() else ""
        _write(m.log, prev + log.getvalue(), "judgments merge")  # the log first: a qrels score never lacks who gave it
        _write(qpath, out.getvalue(), "judgments merge")
    return m
