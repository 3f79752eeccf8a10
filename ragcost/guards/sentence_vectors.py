"""The corpus's sentence vectors, embedded once by `ragcost index` and kept beside the index.

The grounded check compares each answer sentence with the cited chunks and with every sentence
of them. Embedding those sentences at query time was most of the demo's bill; here they are
embedded once per corpus revision (only sentences whose text is new: the rest are reused by
content hash from the previous build) and read by label at query time.

Folder ``<index_dir>/sentences``: ``rows-<id>.npy`` (int64, one row per sentence: chunk label,
start, end, length of its clean text; sorted by label), ``vectors-<id>.npy`` (float32, the
model's native dimension), ``hashes-<id>.npy`` (uint64 of each clean sentence text, for reuse),
``chunks-<id>.npy`` (int64 pairs: chunk label, hash of the chunk text it was split from), and
``sentences.json`` written last (the commit point) with the fingerprint of what made them: the
model's fingerprint, the chunking, the corpus revision and the splitter's version. Vectors made by
anything else are refused with the rebuild command, never mixed in.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from ragcost.atomic import temp_target, write_files
from ragcost.errors import FingerprintError
from ragcost.index.manifest import FileRecord, fingerprint_changes, jsonable
from ragcost.index.verify import file_record

FOLDER = "sentences"
MANIFEST = "sentences.json"
# The sentence rule's version (ragcost.guards.sentence_split.sentences): a change of the rule re-embeds.
SPLITTER = "grounded-1"
_KINDS = ("rows", "vectors", "hashes", "chunks")
EMBED_BATCH = 256  # sentences per embed call at index time (sorted by length, so little padding)


def text_hash(text: str) -> int:
    """A 64-bit content hash (BLAKE2b) of a text, as a signed int64."""
    d = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(d, "little", signed=True)


def sentence_fingerprint(index_fingerprint: dict[str, Any]) -> dict[str, Any]:
    """What makes the sentence vectors: the index's model, chunking and corpus, and the splitter."""
    keep = ("model", "model_fingerprint", "normalize", "chunking", "corpus_revision")
    return jsonable({**{k: index_fingerprint.get(k) for k in keep}, "splitter": SPLITTER})


class SentenceManifest(BaseModel):
    fingerprint: dict[str, Any]
    sentences: int
    chunks: int
    dim: int
    files: dict[str, str] = Field(description="kind (rows, vectors, hashes, chunks) -> file name")
    records: dict[str, FileRecord] = Field(description="file name -> as written")
    embedded: int = Field(0, description="sentences this build embedded (the rest were reused by content hash)")
    build_seconds: float = 0.0
    created_at: str = ""

    def bytes(self) -> int:
        return sum(r.bytes for r in self.records.values())


@dataclass
class SentenceVectors:
    """An opened build: sentence rows and vectors by chunk label (vectors memory-mapped)."""

    rows: np.ndarray  # (n, 4) int64: label, start, end, clean length
    vectors: np.ndarray
    chunk_labels: np.ndarray
    chunk_hashes: np.ndarray
    manifest: SentenceManifest

    def chunk_hash(self, label: int) -> Optional[int]:
        """The hash of the chunk text this label's sentences were split from; None for an unknown label."""
        i = int(np.searchsorted(self.chunk_labels, label))
        if i < len(self.chunk_labels) and self.chunk_labels[i] == label:
            return int(self.chunk_hashes[i])
        return None

    def of_label(self, label: int, min_chars: int) -> np.ndarray:
        """Vectors of the chunk's sentences of at least ``min_chars`` characters, in reading order."""
        lo, hi = np.searchsorted(self.rows[:, 0], [label, label + 1])
        if lo == hi:
            return self.vectors[0:0]
        keep = np.nonzero(self.rows[lo:hi, 3] >= min_chars)[0] + lo
        return np.asarray(self.vectors[keep], dtype=np.float32)


def folder(index_dir: Path | str) -> Path:
    return Path(index_dir) / FOLDER


def load_manifest(directory: Path, hint: str) -> Optional[SentenceManifest]:
    path = directory / MANIFEST
    if not path.is_file():
        return None
    try:
        return SentenceManifest.model_validate_json(path.read_bytes())
    except (ValidationError, OSError, UnicodeDecodeError) as e:
        raise FingerprintError(f"{path}: the sentence-vector manifest is damaged ({type(e).__name__}); {hint}") from None


def open_sentence_vectors(index_dir: Path | str, expected: dict[str, Any], hint: str) -> Optional[SentenceVectors]:
    """The build in ``<index_dir>/sentences``; None when there is none. One made by anything other than
    ``expected`` (another embedder, chunking or corpus revision), or with a damaged file, is refused."""
    directory = folder(index_dir)
    m = load_manifest(directory, hint)
    if m is None:
        return None
    changes = fingerprint_changes(m.fingerprint, expected)
    if changes:
        raise FingerprintError(f"sentence vectors at {directory} were made for something else ({'; '.join(changes)}); "
                               f"they are never mixed in: {hint}")
    for name, rec in m.records.items():
        path = directory / name
        if "/" in name or not path.is_file() or file_record(path) != rec:
            raise FingerprintError(f"{path}: the sentence-vector file is missing or damaged (not as {MANIFEST} says); {hint}")
    rows = np.load(directory / m.files["rows"])
    chunks = np.load(directory / m.files["chunks"])
    vectors = np.load(directory / m.files["vectors"], mmap_mode="r")
    return SentenceVectors(rows, vectors, chunks[:, 0].copy(), chunks[:, 1].copy(), m)


def split_chunks(labels: np.ndarray, texts: list[str]) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(rows, clean sentence texts, chunk pairs) of every sentence of every chunk (labels ascending)."""
    from ragcost.guards.sentence_split import sentences

    rows, sents, chunks = [], [], []
    for label, text in zip(labels.tolist(), texts):
        chunks.append((label, text_hash(text)))
        for a, b, clean in sentences(text, 1):
            rows.append((label, a, b, len(clean)))
            sents.append(clean)
    r = np.array(rows, np.int64).reshape(-1, 4)
    return r, sents, np.array(chunks, np.int64).reshape(-1, 2)


def expected_bytes(labels: np.ndarray, texts: list[str], dim: int) -> int:
    """The bytes `ragcost index` would write for these chunks' sentences, without embedding them (eval prices the
    folder a served pipeline keeps): float32 vectors, int64 rows, uint64 hashes and chunk pairs."""
    rows, _, chunks = split_chunks(labels, texts)
    return int(rows.nbytes + len(rows) * (4 * dim + 8) + chunks.nbytes)


def embed_sorted(embedder, texts: list[str], batch: int = EMBED_BATCH) -> np.ndarray:
    """Vectors of ``texts`` in their order, embedded shortest first so a batch pads to its own length."""
    if not texts:
        return np.zeros((0, getattr(embedder, "native_dim", 0)), np.float32)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: Optional[np.ndarray] = None
    for k in range(0, len(order), batch):
        part = order[k:k + batch]
        vecs = np.asarray(embedder.embed([texts[i] for i in part]), np.float32)
        if out is None:
            out = np.empty((len(texts), vecs.shape[1]), np.float32)
        out[part] = vecs
    return out


def build_sentence_vectors(index_dir: Path | str, labels: np.ndarray, texts: list[str], embedder,
                           fingerprint: dict[str, Any], hint: str,
                           progress: Optional[Callable[[int, int], None]] = None) -> SentenceManifest:
    """Split every chunk into sentences, embed the ones no earlier build holds, write the folder atomically."""
    directory = folder(index_dir)
    t0 = time.perf_counter()
    order = np.argsort(labels, kind="stable")
    labels = np.asarray(labels, np.int64)[order]
    texts = [texts[i] for i in order]
    rows, sents, chunks = split_chunks(labels, texts)
    hashes = np.array([text_hash(t) for t in sents], np.int64)
    vectors = np.zeros((len(sents), embedder.native_dim), np.float32)
    todo = _reuse(directory, fingerprint, hashes, vectors)
    # Overlapping chunk windows repeat sentences: embed each distinct text once, copy it to its repeats.
    first: dict[str, int] = {}
    repeats: list[tuple[int, int]] = []
    unique: list[int] = []
    for i in todo:
        j = first.setdefault(sents[i], i)
        (unique.append(i) if j == i else repeats.append((i, j)))
    if progress and unique:
        progress(0, len(unique))  # the phase's size, before its first part is embedded
    for k in range(0, len(unique), EMBED_BATCH * 8):  # in parts, so progress moves
        part = unique[k:k + EMBED_BATCH * 8]
        vectors[part] = embed_sorted(embedder, [sents[i] for i in part])
        if progress:
            progress(min(k + len(part), len(unique)), len(unique))
    for i, j in repeats:
        vectors[i] = vectors[j]
    build = uuid.uuid4().hex[:16]
    names = {kind: f"{kind}-{build}.npy" for kind in _KINDS}
    arrays = {"rows": rows, "vectors": vectors, "hashes": hashes, "chunks": chunks}
    write_files(directory, {names[k]: _npy(arrays[k]) for k in _KINDS})
    m = SentenceManifest(
        fingerprint=fingerprint, sentences=len(sents), chunks=len(chunks), dim=int(vectors.shape[1]), files=names,
        records={n: file_record(directory / n) for n in names.values()}, embedded=len(unique),
        build_seconds=round(time.perf_counter() - t0, 3),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    write_files(directory, {}, commit=(MANIFEST, lambda p: p.write_text(m.model_dump_json(indent=2))))
    _remove_old(directory, set(names.values()))
    return m


def up_to_date(index_dir: Path | str, fingerprint: dict[str, Any]) -> Optional[SentenceManifest]:
    """The current build when it was made by ``fingerprint`` (files not re-hashed), else None."""
    try:
        m = load_manifest(folder(index_dir), "")
    except FingerprintError:
        return None
    if m is None or m.fingerprint != jsonable(fingerprint):
        return None
    if not all((folder(index_dir) / n).is_file() for n in m.records):
        return None
    return m


def _reuse(directory: Path, fingerprint: dict[str, Any], hashes: np.ndarray, vectors: np.ndarray) -> list[int]:
    """Fill ``vectors`` from the previous build where the same model made the same sentence text;
    return the positions still to embed. Another model's (or splitter's) vectors are never reused."""
    todo = list(range(len(hashes)))
    try:
        old = load_manifest(directory, "")
    except FingerprintError:
        return todo
    same = ("model_fingerprint", "normalize", "splitter")
    if old is None or any(old.fingerprint.get(k) != fingerprint.get(k) for k in same) or old.dim != vectors.shape[1]:
        return todo
    try:
        for name, rec in old.records.items():
            if file_record(directory / name) != rec:
                return todo
        old_h = np.load(directory / old.files["hashes"])
        old_v = np.load(directory / old.files["vectors"], mmap_mode="r")
    except (OSError, ValueError, KeyError):
        return todo
    pos = {int(h): i for i, h in enumerate(old_h.tolist())}
    left = []
    for i, h in enumerate(hashes.tolist()):
        j = pos.get(h)
        if j is None:
            left.append(i)
        else:
            vectors[i] = old_v[j]
    return left


def _npy(array: np.ndarray):
    def write(path: Path) -> None:
        with open(path, "wb") as f:
            np.save(f, array)
    return write


def _remove_old(directory: Path, keep: set[str]) -> None:
    """Delete earlier builds' files and crashed builds' temp files (only names a build writes)."""
    for path in directory.iterdir():
        name = temp_target(path.name) or path.name
        ours = name == MANIFEST or any(name.startswith(k + "-") and name.endswith(".npy") for k in _KINDS)
        if ours and path.name not in keep and path.name != MANIFEST and path.is_file():
            try:
                path.unlink()
            except FileNotFoundError:
                pass
