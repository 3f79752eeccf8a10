"""Hybrid retrieval: BM25 (bm25s) over the stored chunk texts, fused with the dense hits by
reciprocal rank fusion, score(d) = sum over the two rankings of 1 / (rrf_k + rank).

The BM25 index is built lazily from the store's chunks and kept beside the vector index in
``<index_dir>/bm25-<corpus revision>/``; a different revision (or tokenizer settings) builds a new
one and removes the old. Metadata filters hold for the BM25 side too (a weight mask over chunks).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import numpy as np
from pydantic import Field

from ragcost.atomic import temp_target, write_files
from ragcost.errors import DependencyError, IngestError
from ragcost.records import Hit
from ragcost.stages.rerank.base import Reranker, RerankerParams, hit_from_row, reranker_registry

FORMAT = 1
META = "ragcost-bm25.json"


class HybridParams(RerankerParams):
    sparse_k: int = Field(100, ge=1, description="BM25 candidates per query that enter the fusion")
    rrf_k: int = Field(60, ge=1, description="reciprocal rank fusion constant")
    per_document: bool = Field(True, description="fuse documents (best chunk each), as retrieve does")
    stopwords: Literal["en", "none"] = Field("en", description="stop words dropped by the BM25 tokenizer")


def _bm25s():
    try:
        import bm25s
    except ImportError:
        raise DependencyError("rerank backend 'hybrid' needs bm25s: pip install bm25s") from None
    return bm25s


def _tokenize(texts: list[str], stopwords: str):
    return _bm25s().tokenize(texts, stopwords=None if stopwords == "none" else stopwords, show_progress=False)


@dataclass
class BM25Index:
    """A bm25s retriever over chunks; row i of the retriever is chunk ``labels[i]``."""

    retriever: object
    labels: np.ndarray
    path: Path
    stopwords: str = "en"

    def search(self, queries: list[str], k: int, allowed: Optional[np.ndarray] = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """(labels, scores) per query, best first; chunks with no matching term are left out."""
        n = len(self.labels)
        k = min(k, n)
        if not queries or k == 0:
            return [(np.empty(0, np.int64), np.empty(0, np.float32)) for _ in queries]
        mask = None if allowed is None else np.isin(self.labels, allowed).astype(np.float32)
        docs, scores = self.retriever.retrieve(_tokenize(queries, self.stopwords), k=k, show_progress=False, weight_mask=mask, n_threads=1)
        out = []
        for d, s in zip(docs, scores):
            keep = s > 0
            out.append((self.labels[d[keep]], s[keep]))
        return out


def bm25_fingerprint(revision: str, stopwords: str) -> dict:
    return {"format": FORMAT, "corpus_revision": revision, "tokenizer": {"stopwords": stopwords, "lower": True, "stemmer": None}}


def _chunk_texts(store) -> tuple[np.ndarray, list[str]]:
    return store.chunk_column("text")


def build_bm25(ctx, stopwords: str = "en") -> BM25Index:
    """The BM25 index of the pipeline's stored chunks: loaded when one for this revision exists, else built."""
    bm25s = _bm25s()
    store = ctx.store()
    fp = bm25_fingerprint(store.revision(), stopwords)
    root = Path(ctx.index_dir)
    final = root / f"bm25-{fp['corpus_revision'][:16]}-{stopwords}"
    meta = final / META
    if meta.is_file() and json.loads(meta.read_text()) == fp:
        return BM25Index(bm25s.BM25.load(str(final), show_progress=False), np.load(final / "labels.npy"), final, stopwords)
    labels, texts = _chunk_texts(store)
    if not len(labels):
        raise IngestError(f"{ctx.path}: the store has no chunks for BM25; run `ragcost index {ctx.path}` first")
    retriever = bm25s.BM25()
    retriever.index(_tokenize(texts, stopwords), show_progress=False)
    _commit_bm25(root, final, retriever, labels, fp)
    for old in root.glob(f"bm25-*-{stopwords}"):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return BM25Index(retriever, labels, final, stopwords)


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


def rrf(rankings: list[list[str | int]], k: int = 60) -> dict[str | int, float]:
    """Reciprocal rank fusion: key -> sum of 1 / (k + rank), ranks from 1."""
    out: dict[str | int, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, 1):
            out[key] = out.get(key, 0.0) + 1.0 / (k + rank)
    return out


@reranker_registry.register("hybrid")
class Hybrid(Reranker):
    name = "hybrid"
    score_scale = "rrf"
    Params = HybridParams

    def __init__(self, params: HybridParams, ctx) -> None:
        super().__init__(params, ctx)
        self._index: Optional[BM25Index] = None

    @classmethod
    def scale_of(cls, params: HybridParams) -> tuple[str, float, float, str]:
        # A document first in both rankings scores 2 / (rrf_k + 1): the most RRF can give.
        return "rrf", 0.0, 2.0 / (params.rrf_k + 1), f"RRF (rrf_k {params.rrf_k})"

    def warm_up(self) -> None:
        self.index()

    def index_bytes(self) -> int:
        """Bytes of the BM25 index's folder (loaded whole into RAM by bm25s): what storage charges."""
        from ragcost.cost.storage import folder_bytes

        return folder_bytes(self.index().path)

    def index(self) -> BM25Index:
        if self._index is None:
            self._index = build_bm25(self.ctx, self.params.stopwords)
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
        want = sorted({int(x) for lb, _ in sparse.values() for x in lb})
        rows = {r["label"]: r for r in store.chunks(want)} if want else {}
        fused = 0
        for s in batch:
            fused += self._fuse(s, sparse[id(s)], rows)
        usage.notes["rerank"] = {"scored": fused, "batches": len(groups)}

    def _fuse(self, s, sparse: tuple[np.ndarray, np.ndarray], rows: dict) -> int:
        key = (lambda h: h.doc_id) if self.params.per_document else (lambda h: h.label)
        dense: list[Hit] = list(s.hits)
        bm25: list[Hit] = []
        seen: set = set()
        for label, score in zip(*sparse):
            r = rows.get(int(label))
            if r is None:
                continue
            h = hit_from_row(r, float(score))
            if key(h) in seen:
                continue
            seen.add(key(h))
            bm25.append(h)
        scores = rrf([[key(h) for h in dense], [key(h) for h in bm25]], self.params.rrf_k)
        by_key: dict = {}
        for h in bm25 + dense:  # the dense hit (its chunk) wins when both lists have the document
            by_key[key(h)] = h
        n = self.params.top_n or s.k
        best = sorted(scores, key=lambda k: -scores[k])[:n]
        s.hits = []
        for k in best:
            h = by_key[k]
            h.score = float(scores[k])
            s.hits.append(h)
        return len(dense) + len(bm25)
