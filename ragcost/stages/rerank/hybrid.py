"""Hybrid retrieval: BM25 (bm25s) over the stored chunk texts, fused with the dense hits by
reciprocal rank fusion, score(d) = sum over the two rankings of 1 / (rrf_k + rank).

The BM25 index is built lazily from the store's chunks and kept beside the vector index in
``<index_dir>/bm25-<corpus revision>/``; a different revision (or tokenizer settings) builds a new
one and removes the old. Metadata filters hold for the BM25 side too (a weight mask over chunks).
"""

from __future__ import annotations

import json
import keyword
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import numpy as np
from pydantic import Field

from ragcost.atomic import temp_target, write_files
from ragcost.errors import DependencyError, IngestError
from ragcost.generate.extractive import light_stem
from ragcost.records import Hit
from ragcost.stages.rerank.base import Reranker, RerankerParams, hit_from_row, reranker_registry

FORMAT = 1
META = "ragcost-bm25.json"


class HybridParams(RerankerParams):
    sparse_k: int = Field(100, ge=1, description="BM25 candidates per query that enter the fusion")
    rrf_k: int = Field(60, ge=1, description="reciprocal rank fusion constant")
    per_document: bool = Field(True, description="fuse documents (best chunk each), as retrieve does")
    stopwords: Literal["en", "questions", "code", "none"] = Field(
        "en", description="stop words the BM25 tokenizer drops: en (bm25s's English list), questions (en and the words "
                          "a question is made of: what, how, does ...), code (questions, but Python's keywords kept), none")
    tokenizer: Literal["words", "code"] = Field(
        "words", description="words: runs of two or more letters/digits/underscores (bm25s's pattern); code: identifiers "
                             "(`__exit__`, `str.lstrip` whole and as `str`, `lstrip`), numbers and operators (`**`, `//`, `@`)")
    stem: bool = Field(False, description="a light suffix strip on both sides (calls -> call), as the extractive evidence")
    sparse_weight: float = Field(1.0, ge=0.0, le=1.0, description="BM25's weight in the fusion: 1 / (rrf_k + dense rank) + "
                                                                "weight / (rrf_k + BM25 rank)")
    prose_weight: Optional[float] = Field(
        None, ge=0.0, le=1.0, description="BM25's weight for a question that names no identifier, operator or number "
                                          "(`__exit__`, `str.strip`, `NotImplemented`, `len()`, `//`, `429`): plain "
                                          "prose, where dense retrieval matches the meaning and BM25 only the words; "
                                          "default: sparse_weight")


def _bm25s():
    try:
        import bm25s
    except ImportError:
        raise DependencyError("rerank backend 'hybrid' needs bm25s: pip install bm25s") from None
    return bm25s


# What a question is made of beside its subject; BM25 over a reference manual otherwise ranks the
# passages that say "how" and "does" most.
QUESTION_WORDS = frozenset("what which how does do did when why where who whom whose can could should would i my me "
                           "we you your".split())
_WORDS = re.compile(r"(?u)\b\w\w+\b")  # bm25s's default token pattern
# An identifier with its dotted attributes, a number, or an operator (longest first).
_CODE = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*|\d[\w.]*|\*\*=?|//=?|<<=?|>>=?|->|:=|[-+*/%@&|^~<>=!]=?")


@dataclass(frozen=True)
class Tokenizer:
    """The BM25 tokenizer: the corpus and the queries go through the same one (its settings are in the fingerprint)."""

    tokenizer: str = "words"
    stopwords: str = "en"
    stem: bool = False

    @property
    def stop(self) -> frozenset[str]:
        if self.stopwords == "none":
            return frozenset()
        en = frozenset(_bm25s().stopwords.STOPWORDS_EN)
        if self.stopwords == "en":
            return en
        words = en | QUESTION_WORDS
        return words - frozenset(keyword.kwlist) if self.stopwords == "code" else words

    def __call__(self, texts: list[str]) -> list[list[str]]:
        stop = self.stop
        out = []
        for t in texts:
            t = t.lower()
            if self.tokenizer == "code":
                toks: list[str] = []
                for m in _CODE.findall(t):
                    toks.append(m)
                    if "." in m and not m[0].isdigit():
                        toks.extend(m.split("."))
            else:
                toks = _WORDS.findall(t)
            toks = [w for w in toks if w not in stop]
            out.append([light_stem(w) for w in toks] if self.stem else toks)
        return out

    def fingerprint(self) -> dict:
        return {"tokenizer": self.tokenizer, "stopwords": self.stopwords, "stem": self.stem, "lower": True}

    def tag(self) -> str:
        return f"{self.tokenizer}-{self.stopwords}" + ("-stem" if self.stem else "")


@dataclass
class BM25Index:
    """A bm25s retriever over chunks; row i of the retriever is chunk ``labels[i]``."""

    retriever: object
    labels: np.ndarray
    path: Path
    tokenize: Tokenizer = Tokenizer()

    def search(self, queries: list[str], k: int, allowed: Optional[np.ndarray] = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """(labels, scores) per query, best first; chunks with no matching term are left out."""
        n = len(self.labels)
        k = min(k, n)
        if not queries or k == 0:
            return [(np.empty(0, np.int64), np.empty(0, np.float32)) for _ in queries]
        mask = None if allowed is None else np.isin(self.labels, allowed).astype(np.float32)
        vocab = self.retriever.vocab_dict
        tokens = [[w for w in q if w in vocab] for q in self.tokenize(queries)]
        out: list = [None] * len(queries)
        asked = [i for i, q in enumerate(tokens) if q]  # a query with no word of the corpus matches nothing
        if asked:
            docs, scores = self.retriever.retrieve([tokens[i] for i in asked], k=k, show_progress=False, weight_mask=mask, n_threads=0)  # 0: in this thread (1 starts a pool per call)
            for i, d, s in zip(asked, docs, scores):
                keep = s > 0
                out[i] = (self.labels[d[keep]], s[keep])
        return [o if o is not None else (np.empty(0, np.int64), np.empty(0, np.float32)) for o in out]


def bm25_fingerprint(revision: str, tokenize: Tokenizer) -> dict:
    return {"format": FORMAT, "corpus_revision": revision, "tokenizer": tokenize.fingerprint()}


def _chunk_texts(store) -> tuple[np.ndarray, list[str]]:
    return store.chunk_column("text")


def build_bm25(ctx, tokenize: Tokenizer = Tokenizer()) -> BM25Index:
    """The BM25 index of the pipeline's stored chunks: loaded when one for this revision and tokenizer exists, else built."""
    bm25s = _bm25s()
    store = ctx.store()
    fp = bm25_fingerprint(store.revision(), tokenize)
    root = Path(ctx.index_dir)
    final = root / f"bm25-{fp['corpus_revision'][:16]}-{tokenize.tag()}"
    meta = final / META
    if meta.is_file() and json.loads(meta.read_text()) == fp:
        return BM25Index(bm25s.BM25.load(str(final), load_vocab=True, show_progress=False), np.load(final / "labels.npy"), final, tokenize)
    labels, texts = _chunk_texts(store)
    if not len(labels):
        raise IngestError(f"{ctx.path}: the store has no chunks for BM25; run `ragcost index {ctx.path}` first")
    retriever = bm25s.BM25()
    retriever.index(tokenize(texts), show_progress=False)
    _commit_bm25(root, final, retriever, labels, fp)
    for old in root.glob(f"bm25-*-{tokenize.tag()}"):  # an older revision's, for the same tokenizer
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return BM25Index(retriever, labels, final, tokenize)


def _commit_bm25(root: Path, final: Path, retriever, labels: np.ndarray, fp: dict) -> None:
    """Write the BM25 folder with the one atomic folder write: its files first, the meta file last
    (a folder whose meta is missing or differs is unfinished and gets rebuilt)."""
    root.mkdir(parents=True, exist_ok=True)
    scratch = root / f".bm25-{uuid.uuid4().hex[:12]}.building"  # bm25s saves a folder; its files move from here
    try:
        retriever.save(str(scratch), show_progress=False)
        files = {p.name: (lambda dst, src=p: os.replace(src, dst)) for p in scratch.iterdir() if p.is_file()}

        def write_labels(dst: Path) -> None:
            with open(dst, "wb") as f:  # a file object: np.save(path) would append ".npy" to the temp name
                np.save(f, labels)

        files["labels.npy"] = write_labels
        if final.is_dir():  # an older build's meta must not vouch for the files replaced under it
            (final / META).unlink(missing_ok=True)
        write_files(final, files, commit=(META, lambda p: p.write_text(json.dumps(fp, sort_keys=True))))
        for p in final.iterdir():  # files an older bm25s wrote that this one did not
            if p.name not in files and p.name != META and p.is_file() and temp_target(p.name) is None:
                p.unlink(missing_ok=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def rrf(rankings: list[list[str | int]], k: int = 60, weights: Optional[list[float]] = None) -> dict[str | int, float]:
    """Reciprocal rank fusion: key -> sum over rankings of weight / (k + rank), ranks from 1 (weights default 1)."""
    out: dict[str | int, float] = {}
    for i, ranking in enumerate(rankings):
        w = 1.0 if weights is None else weights[i]
        for rank, key in enumerate(ranking, 1):
            out[key] = out.get(key, 0.0) + w / (k + rank)
    return out


# What BM25 matches exactly and a sentence embedding blurs: a dotted or underscored name (`str.strip`,
# `__exit__`, `co_varnames`), a capital inside a word (`NotImplemented`, `ValueError`), a call (`len()`),
# a subscript (`a[i]`, `a[::2]`), a conversion (`!r`), a back-quoted span, a number (`429`, `0.0`), or an
# operator of two characters or a lone operator character between spaces (`//`, `**=`, ` @ `, ` % `).
_EXACT = re.compile(r"[A-Za-z_]\w*[._]\w|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z]+[A-Z]\w*|\w\(\)|\w\[[^\]]*\]|![rsa]\b|`[^`]+`"
                    r"|\b\d|\*\*|//|<<|>>|->|:=|[-+*/%@&|^~<>=!]=|(?:^|\s)[-+*/%@&|^~<>]+(?=\s|$)")


def names_exact_terms(question: str) -> bool:
    """Whether a question names an identifier, an operator or a number: terms BM25 matches exactly (and
    deserves its full weight for); a question without any is plain prose."""
    return bool(_EXACT.search(question))


@reranker_registry.register("hybrid")
class Hybrid(Reranker):
    name = "hybrid"
    score_scale = "rrf"
    Params = HybridParams

    def __init__(self, params: HybridParams, ctx) -> None:
        super().__init__(params, ctx)
        self._index: Optional[BM25Index] = None
        self._doc_of: dict[int, str] = {}

    @classmethod
    def scale_of(cls, params: HybridParams) -> tuple[str, float, float, str]:
        # A document first in both rankings scores 2 / (rrf_k + 1): the most RRF can give.
        return "rrf", 0.0, 2.0 / (params.rrf_k + 1), f"RRF (rrf_k {params.rrf_k})"

    def warm_up(self) -> None:
        self.index()

    def prepare(self) -> Optional[str]:
        """The BM25 index, built (or found current) at index time: a first query then loads it (the demo's 871
        chunks; a 4,594-chunk corpus took a user's first query ~12 s to build)."""
        t0 = time.perf_counter()
        built = self.index()
        return (f"keyword index (BM25, {self.params.tokenizer} tokenizer) for {len(built.labels)} chunks, "
                f"{time.perf_counter() - t0:.1f}s -> {built.path}")

    def index_bytes(self) -> int:
        """Bytes of the BM25 index's folder (loaded whole into RAM by bm25s): what storage charges."""
        from ragcost.cost.storage import folder_bytes

        return folder_bytes(self.index().path)

    def index(self) -> BM25Index:
        if self._index is None:
            p = self.params
            self._index = build_bm25(self.ctx, Tokenizer(p.tokenizer, p.stopwords, p.stem))
            labels, docs = self.ctx.store().chunk_column("doc_id")
            self._doc_of = dict(zip(labels.tolist(), docs))
        return self._index

    def rerank(self, batch, usage) -> None:
        index, store = self.index(), self.ctx.store()
        groups: dict[str, list] = {}
        for s in batch:
            groups.setdefault(json.dumps(s.filter, sort_keys=True) if s.filter else "", []).append(s)
        sparse: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for key, states in groups.items():
            allowed = store.matching_labels(states[0].filter) if key else None
            for s, res in zip(states, index.search([s.text for s in states], self.params.sparse_k, allowed)):
                sparse[id(s)] = res
        # Fuse on the document ids held in memory; only the chunks shown that dense retrieval did not
        # bring are read from the store (reading every BM25 candidate cost ~20 ms a query on DuckDB).
        fused, scored = [], 0
        per_doc = self.params.per_document
        dense_of = {id(s): {h.doc_id if per_doc else h.label: h for h in reversed(s.hits)} for s in batch}  # the first hit per key
        for s in batch:
            winners, n = self._fuse(s, sparse[id(s)])
            fused.append(winners)
            scored += n
        want = sorted({w for winners in fused for _, w, _ in winners if isinstance(w, int)})
        rows = {r["label"]: r for r in store.chunks(want)} if want else {}
        for s, winners in zip(batch, fused):
            s.hits = []
            for key, h, score in winners:
                if isinstance(h, int):  # a BM25 label: its row, unless the chunk went meanwhile
                    if h not in rows:
                        h = dense_of[id(s)].get(key)  # then the dense hit of that document, if it had one
                        if h is None:
                            continue
                    else:
                        h = hit_from_row(rows[h], score)
                h.score = score
                s.hits.append(h)
        usage.notes["rerank"] = {"scored": scored, "batches": len(groups)}

    def _fuse(self, s, sparse: tuple[np.ndarray, np.ndarray]) -> tuple[list, int]:
        """The fused top (key, dense Hit or BM25 chunk label, RRF score), best first, and the candidates scored."""
        per_doc = self.params.per_document
        dense: list[Hit] = list(s.hits)
        by_key: dict = {}
        for h in dense:
            by_key.setdefault(h.doc_id if per_doc else h.label, h)
        bm25: dict = {}  # key -> its best chunk's label
        for label in sparse[0].tolist():
            doc = self._doc_of.get(label)
            if doc is None:  # a chunk the store no longer has
                continue
            bm25.setdefault(doc if per_doc else label, label)
        p = self.params
        w = p.sparse_weight if p.prose_weight is None or names_exact_terms(s.text) else p.prose_weight
        scores = rrf([list(by_key), list(bm25)], p.rrf_k, [1.0, w])
        n = max(self.params.top_n or s.k, s.keep or 0)  # the stage cuts to what the request asked for
        best = sorted(scores, key=lambda k: -scores[k])[:n]
        # A document both lists have is shown by the chunk of the list that gave it more of its score
        # (the dense one on a tie): for "__delete__" BM25 ranks the chunk that defines it, while the
        # document's nearest chunk by cosine may not name it, and the answer is drawn from that chunk.
        dense_rank = {k: r for r, k in enumerate(by_key, 1)}
        bm25_rank = {k: r for r, k in enumerate(bm25, 1)}

        def shown(k):
            if k not in by_key:
                return bm25[k]
            if k in bm25 and w / (p.rrf_k + bm25_rank[k]) > 1.0 / (p.rrf_k + dense_rank[k]) and bm25[k] != by_key[k].label:
                return bm25[k]
            return by_key[k]

        return [(k, shown(k), float(scores[k])) for k in best], len(dense) + len(bm25)
