"""After generation: every answer sentence must be supported by the retrieved (or cited) context.

A sentence is supported when its embedding (the pipeline's embedder, at the model's native
dimension) has cosine similarity at or above ``threshold`` with some context passage or some
sentence of one. ``mode`` says where those vectors come from:

- ``stored`` (the default): a passage's vector is the chunk vector stored at index time; its
  sentences' vectors were embedded once by `ragcost index` (``sentence_vectors: index``, kept
  beside the index) or are embedded on first use and cached by content hash (``query``, or an
  index built without them: slower, the same verdicts). A sentence that is a normalised verbatim
  span of a context passage is supported without a model (``verbatim``). The answer's other
  sentences are embedded in their own batch, shortest first, so nothing is padded to a chunk.
- ``reembed``: the check as ragcost 0.1 ran it: every context passage and every sentence of it
  embedded again at query time, in one batch. Kept to compare against (``python -m bench.guards``).

Each checked answer gets ``QueryState.notes["grounded"]``: one verdict per sentence, in order,
``{"sentence", "span", "supported", "score", "hit", "doc_id", "via"}`` -- ``hit`` is the index in
``hits`` of the passage that supports it best (``doc_id`` its document), ``via`` how: ``verbatim``,
``passage`` (the chunk vector) or ``sentence`` (a sentence of it); for an unsupported sentence
``hit``/``doc_id`` name the closest passage. This record is read by other parts (the useful-citation
count): keep its keys stable.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Literal, Optional

import numpy as np
from pydantic import Field

from ragcost.errors import ConfigError
from ragcost.guards.base import Finding, Guard, GuardParams, guard_registry
from ragcost.guards.sentence_split import normalised, pieces, sentences

__all__ = ["GroundedGuard", "GroundedParams", "normalised", "sentences", "wants_index_sentences"]

CACHE_SIZE = 50_000  # sentence and passage vectors kept by content hash (~77 MB at 384 dims)


class GroundedParams(GuardParams):
    threshold: float = Field(0.5, ge=-1, le=1, description="cosine similarity a sentence needs with some context passage")
    min_chars: int = Field(12, ge=1, description="shorter sentences (\"Yes.\") are not checked")
    cited_only: bool = Field(False, description="support must come from the hits the answer cites")
    mode: Literal["stored", "reembed"] = Field(
        "stored", description="stored: passage vectors stored at index time, sentence vectors from `ragcost index` or "
                              "cached; reembed: every passage and its sentences embedded again per query (ragcost 0.1's "
                              "check, about 10x-100x the CPU; kept to compare against)")
    sentence_vectors: Literal["index", "query"] = Field(
        "index", description="mode stored: index = the corpus's sentences embedded once by `ragcost index` (stored "
                             "beside the index; an index without them still works, embedding on first use); query = "
                             "embedded on first use only, cached by content hash in the process")
    verbatim: bool = Field(True, description="mode stored: a sentence that is a normalised verbatim span of a context "
                                             "passage is supported without embedding it")


def wants_index_sentences(checks: list) -> bool:
    """Whether these guard-stage ``checks`` hold a grounded check that reads index-time sentence vectors."""
    for spec in checks:
        name, opts = (spec, {}) if isinstance(spec, str) else (spec.get("check"), spec)
        if name == "grounded":
            p = GroundedParams.model_validate({k: v for k, v in opts.items() if k != "check"})
            if p.mode == "stored" and p.sentence_vectors == "index":
                return True
    return False


@guard_registry.register("grounded")
class GroundedGuard(Guard):
    """Lists unsupported answer sentences; flags or blocks. Every sentence's verdict goes to the query's notes."""

    name = "grounded"
    Params = GroundedParams
    targets = ("answer",)
    policies = ("flag", "block")
    default_policy = "flag"
    per_sentence = True  # each sentence is checked on its own against the (cited) passages

    def __init__(self, params: GroundedParams, ctx=None) -> None:
        super().__init__(params, ctx)
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._sentence_vectors: Any = None
        self._looked = False
        self._stored_hash: dict[int, Optional[int]] = {}
        self._notes: dict[str, Any] = {}

    def warm_up(self) -> None:
        emb = self._embedder()
        getattr(emb, "warm_up_queries", emb.warm_up)()  # the query path's encoder: it embeds the answer's sentences
        if self.params.mode == "stored":
            self._index_sentences()

    def _embedder(self):
        if self.ctx is None:
            raise ConfigError("guard 'grounded' needs a context with the embedder; construct it with (params, ctx)")
        return self.ctx.embedder

    def stage_notes(self) -> dict[str, Any]:
        return dict(self._notes)

    # ---- the check -----------------------------------------------------------------------
    def check(self, batch, on: str) -> list[list[Finding]]:
        # flat numeric counters: the stage's notes are summed over calls
        self._notes = {"sentences": 0, "verbatim": 0, "embedded": 0}
        per_state = []
        for s in batch:
            # an answer that abstains ("the sources hold no answer") makes no claim to check
            abstained = bool(s.generation.get("abstained"))
            sents = [] if abstained else sentences(s.answer or "", self.params.min_chars)
            cited = set(s.citations)
            hits = [i for i, h in enumerate(s.hits) if not self.params.cited_only or h.doc_id in cited]
            per_state.append((sents, hits))
        self._notes["sentences"] = sum(len(x) for x, _ in per_state)
        if self.params.mode == "reembed":
            verdicts = self._reembed(batch, per_state)
        else:
            verdicts = self._stored(batch, per_state)
        out: list[list[Finding]] = []
        for s, (sents, _), vs in zip(batch, per_state, verdicts):
            found = []
            record = []
            for n, ((a, b, text), (best, hit, via)) in enumerate(zip(sents, vs)):
                ok = best >= self.params.threshold
                record.append({"sentence": n, "span": [a, b], "supported": ok, "score": round(float(best), 4),
                               "hit": hit, "doc_id": s.hits[hit].doc_id if hit is not None else None,
                               "via": via if ok else None})
                if not ok:
                    found.append(Finding(self.name, "unsupported_sentence", 1.0 - max(best, 0.0), on="answer", span=(a, b),
                                         match=text[:300], reason=f"sentence not supported by the context (best similarity {best:.2f} < {self.params.threshold})"))
            if sents:
                s.notes["grounded"] = record
            out.append(found)
        return out

    # ---- ragcost 0.1's way: embed the whole context again --------------------------------
    def _reembed(self, batch, per_state) -> list[list[tuple[float, Optional[int], str]]]:
        emb = self._embedder()
        all_sents, all_ctx, layout = [], [], []
        for s, (sents, hits) in zip(batch, per_state):
            owner, via = [], []
            c0 = len(all_ctx)
            for i in hits:
                h = s.hits[i]
                all_ctx.append(h.text)
                owner.append(i), via.append("passage")
                for _, _, t in sentences(h.text, self.params.min_chars):
                    all_ctx.append(t)
                    owner.append(i), via.append("sentence")
            layout.append((len(all_sents), c0, owner, via))
            all_sents.extend(t for _, _, t in sents)
        self._notes.update(embedded=len(all_sents), context_embedded=len(all_ctx))
        if not all_sents:
            return [[] for _ in batch]
        sv = emb.embed(all_sents)
        cv = emb.embed(all_ctx) if all_ctx else np.zeros((0, sv.shape[1]), np.float32)
        out = []
        for (sents, _), (s0, c0, owner, via) in zip(per_state, layout):
            ctx = cv[c0:c0 + len(owner)]
            out.append([_best(ctx, sv[s0 + k], owner, via) for k in range(len(sents))])
        return out

    # ---- stored vectors, verbatim spans, a batch of answer sentences of their own --------
    def _stored(self, batch, per_state) -> list[list[tuple[float, Optional[int], str]]]:
        out: list[list[Any]] = []
        todo: list[tuple[int, int, str]] = []  # (state, sentence, text) still to embed
        verbatim = 0
        for si, (s, (sents, hits)) in enumerate(zip(batch, per_state)):
            row: list[Any] = [None] * len(sents)
            if self.params.verbatim and hits:
                passages = [(i, normalised(s.hits[i].text)) for i in hits]
                for k, (a, b, _) in enumerate(sents):
                    i = _verbatim(pieces(s.answer[a:b]), passages)
                    if i is not None:
                        row[k] = (1.0, i, "verbatim")
                        verbatim += 1
            todo.extend((si, k, sents[k][2]) for k in range(len(sents)) if row[k] is None)
            out.append(row)
        self._notes["verbatim"] = verbatim
        self._notes["embedded"] = len(todo)
        if not todo:
            return out
        from ragcost.guards.sentence_vectors import embed_sorted

        sv = embed_sorted(self._embedder(), [t for _, _, t in todo])
        need = sorted({si for si, _, _ in todo})
        ctx = {si: self._context(batch[si], per_state[si][1]) for si in need}
        for (si, k, _), v in zip(todo, sv):
            mat, owner, via = ctx[si]
            out[si][k] = _best(mat, v, owner, via)
        return out

    def _context(self, s, hits: list[int]) -> tuple[np.ndarray, list[int], list[str]]:
        """The cited passages' vectors and their sentences' (rows), which hit each row is of and how."""
        mats, owner, via = [], [], []
        for i in hits:
            h = s.hits[i]
            pv, sv = self._passage_vectors(h)
            mats.append(pv[None, :])
            owner.append(i), via.append("passage")
            if len(sv):
                mats.append(sv)
                owner.extend([i] * len(sv)), via.extend(["sentence"] * len(sv))
        return (np.vstack(mats) if mats else np.zeros((0, 1), np.float32)), owner, via

    # ---- where each passage's vectors come from ------------------------------------------
    def _count(self, key: str, n: int = 1) -> None:
        self._notes[key] = self._notes.get(key, 0) + n

    def _passage_vectors(self, h) -> tuple[np.ndarray, np.ndarray]:
        """(chunk vector, its sentences' vectors): stored when the hit's text is the stored chunk's, else embedded."""
        from ragcost.guards.sentence_vectors import text_hash

        th = text_hash(h.text)
        stored = self._is_stored(h.label, th)
        pv = self._stored_chunk_vector(h.label) if stored else None
        if pv is None:
            pv = self._cached([h.text], "passages")[0]
        else:
            self._count("passages_stored")
        idx = self._index_sentences()
        if stored and idx is not None and idx.chunk_hash(h.label) == th:
            sv = idx.of_label(h.label, self.params.min_chars)
            self._count("sentences_index", len(sv))
        else:
            sv = self._cached([t for _, _, t in sentences(h.text, self.params.min_chars)], "sentences")
        return pv, sv

    def _is_stored(self, label: int, th: int) -> bool:
        """Whether the hit's text is the chunk text the store holds under its label (not redacted since, not made up)."""
        if label not in self._stored_hash:
            idx = self._index_sentences()
            known = idx.chunk_hash(label) if idx is not None else None
            if known is None:
                known = self._hash_from_store(label)
            self._stored_hash[label] = known
        return self._stored_hash[label] == th

    def _hash_from_store(self, label: int) -> Optional[int]:
        from ragcost.guards.sentence_vectors import text_hash

        store = getattr(self.ctx, "store", None)
        if store is None:
            return None
        rows = store().chunks([label])
        return text_hash(rows[0]["text"]) if rows else None

    def _stored_chunk_vector(self, label: int) -> Optional[np.ndarray]:
        art_of = getattr(self.ctx, "artifact", None)
        if art_of is None:
            return None
        art = art_of()
        if art.manifest.dim == getattr(self._embedder(), "native_dim", None):
            i = int(np.searchsorted(art.labels, label))
            if i < len(art.labels) and art.labels[i] == label:
                return np.asarray(art.vectors[i], np.float32)
            return None
        v = self.ctx.store().vectors_for([label]).get(int(label))  # a truncated index: the store keeps full vectors
        return None if v is None else np.asarray(v, np.float32)

    def _index_sentences(self):
        """The index-time sentence vectors, once; None when the index was built without them (then the
        sentences are embedded on first use). Ones made for another model or corpus revision are refused."""
        if self._looked:
            return self._sentence_vectors
        self._looked = True
        if self.params.sentence_vectors != "index" or getattr(self.ctx, "artifact", None) is None:
            return None
        from ragcost.guards.sentence_vectors import open_sentence_vectors, sentence_fingerprint

        art = self.ctx.artifact()
        hint = self.ctx.rebuild_hint() if hasattr(self.ctx, "rebuild_hint") else f"run `ragcost index {getattr(self.ctx, 'path', 'PIPELINE')}` to rebuild"
        self._sentence_vectors = open_sentence_vectors(self.ctx.index_dir, sentence_fingerprint(art.manifest.fingerprint), hint)
        return self._sentence_vectors

    def _cached(self, texts: list[str], what: str) -> np.ndarray:
        """Vectors of ``texts``, embedded (one batch, shortest first) only where no earlier query embedded the same text."""
        from ragcost.guards.sentence_vectors import embed_sorted, text_hash

        keys = [text_hash(t) for t in texts]
        miss = sorted({k: t for k, t in zip(keys, texts) if k not in self._cache}.items())
        if miss:
            for (k, _), v in zip(miss, embed_sorted(self._embedder(), [t for _, t in miss])):
                self._cache[k] = v
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
            self._count(f"{what}_embedded", len(miss))
        for k in keys:
            self._cache.move_to_end(k)
        self._count(f"{what}_cached", len(texts) - len(miss))
        return np.vstack([self._cache[k] for k in keys]) if keys else np.zeros((0, 1), np.float32)


def _best(ctx: np.ndarray, v: np.ndarray, owner: list[int], via: list[str]) -> tuple[float, Optional[int], str]:
    """(best cosine, the hit of the best row, how) of one answer sentence; (-1, None, "") without context."""
    if not len(owner):
        return -1.0, None, ""
    scores = ctx @ v
    j = int(np.argmax(scores))
    return float(scores[j]), owner[j], via[j]


def _verbatim(parts: list[str], passages: list[tuple[int, str]]) -> Optional[int]:
    """The hit holding the longest part when every part is a verbatim span of some passage, else None."""
    found = []
    for part in parts:
        i = next((i for i, p in passages if part in p), None)
        if i is None:
            return None
        found.append((len(part), i))
    return max(found)[1] if found else None
