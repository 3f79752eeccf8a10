"""A seeded synthetic BEIR folder and a tiny hashing embedder, so eval tests run in seconds without torch."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from ragcost.embed.base import Embedder, embedder_registry

REPO = Path(__file__).resolve().parents[2]
TOPICS = [
    "solar panels sunlight electricity", "vaccines immune antibodies", "rivers erosion valleys",
    "neural networks gradient training", "volcanoes magma eruption", "bees pollination flowers",
    "glaciers ice mountains", "antibiotics bacteria resistance",
]
_WORD = re.compile(r"\w+")


class WordTokenizer:
    """The slice of a Hugging Face fast tokenizer the chunker and embedder use: words as tokens."""

    def __call__(self, texts, add_special_tokens=False, return_offsets_mapping=False, truncation=False, verbose=False):
        single = isinstance(texts, str)
        batch = [texts] if single else list(texts)
        ids = [[hash(m.group()) % 30000 for m in _WORD.finditer(t)] for t in batch]
        offs = [[(m.start(), m.end()) for m in _WORD.finditer(t)] for t in batch]
        if add_special_tokens:
            ids = [[101, *x, 102] for x in ids]
        out = {"input_ids": ids[0] if single else ids}
        if return_offsets_mapping:
            out["offset_mapping"] = offs[0] if single else offs
        return out


@embedder_registry.register("test-hashing")
class HashingEmbedder(Embedder):
    """Bag of hashed words in 64 dims, L2-normalised: similar words -> similar vectors, deterministic."""

    name = "test-hashing"
    DIM = 64

    def embed_batch(self, texts):
        out = np.zeros((len(texts), self.DIM), np.float32)
        for i, t in enumerate(texts):
            for w in _WORD.findall(t.lower()):
                h = int(hashlib.md5(w.encode()).hexdigest(), 16)
                out[i, h % self.DIM] += 1.0 + (h >> 8) % 3
                out[i, (h >> 16) % self.DIM] += 0.5
            out[i] += 0.01
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    @property
    def native_dim(self) -> int:
        return self.DIM

    @property
    def max_tokens(self) -> int:
        return 128

    @property
    def tokenizer(self):
        return WordTokenizer()

    def fingerprint(self) -> str:
        return "f" * 64


def write_beir(root: Path, n_docs: int = 96, seed: int = 0, extra_qrels: str = "") -> Path:
    """corpus.jsonl, queries.jsonl (8 topics + 1 unjudged) and graded qrels.tsv, seeded."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    fillers = ["study", "report", "analysis", "review", "note", "data", "method", "result"]
    with (root / "corpus.jsonl").open("w") as f:
        for i in range(n_docs):
            words = TOPICS[i % 8].split()
            body = " ".join(rng.choice(words + fillers, size=12))
            f.write(json.dumps({"_id": f"d{i}", "title": f"{words[0]} {i}", "text": body}) + "\n")
    with (root / "queries.jsonl").open("w") as f:
        for j, t in enumerate(TOPICS):
            f.write(json.dumps({"_id": f"q{j}", "text": f"what about {t}"}) + "\n")
        f.write(json.dumps({"_id": "q-unjudged", "text": "nothing judged"}) + "\n")
    with (root / "qrels.tsv").open("w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for j in range(8):
            for i in range(j, n_docs, 8):
                f.write(f"q{j}\td{i}\t{3 if i < 16 else 1}\n")
        f.write(extra_qrels)
    return root


def write_spec(folder: Path, grid: str | None = None, name: str = "spec.yaml", **extra) -> Path:
    """A pipeline using the hashing embedder and an eval spec over the synthetic dataset (another ``name`` writes a
    second spec beside the first, over the same data, pipeline and cache)."""
    pipe = {
        "name": "synthetic", "store": f"duckdb:///{folder / 'store.duckdb'}",
        "chunking": {"size": 16, "overlap": 4}, "embed": {"type": "test-hashing", "batch_size": 16},
        "pricing": str(REPO / "pricing" / "default.yaml"),
    }
    (folder / "pipe.yaml").write_text(json.dumps(pipe))
    # one timed pass of each served path (the spec's served_rounds; eval's default is 3, whose spread is tune's noise
    # term): these tests read quality, structure and dollars within one run. A test of the passes passes its own.
    base = {"dims": [64, 32], "precisions": ["float32", "int8"], "k": [5, 10], "served_rounds": 1}
    lines = ["pipeline: pipe.yaml", "dataset: data/synth"]
    lines += [f"{k}: {json.dumps(v)}" for k, v in {**base, **extra}.items()]
    lines.append(grid or f"""grid:
  - index: {REPO}/indexes/flat.yaml
  - index: {REPO}/indexes/hnsw-m16.yaml
    sweep: {{ef: [8, 64]}}
  - index: {REPO}/indexes/ivf-flat.yaml
    sweep: {{nprobe: [1, 4]}}
  - index: {REPO}/indexes/ivfpq-m24.yaml""")
    p = folder / name
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.fixture
def synth(tmp_path: Path) -> Path:
    """A folder with data/synth (BEIR), pipe.yaml and spec.yaml; returns the spec path."""
    write_beir(tmp_path / "data" / "synth", extra_qrels="q0\tghost-doc\t1\nq-missing\td1\t2\n")
    return write_spec(tmp_path)


@pytest.fixture(autouse=True, scope="session")
def _one_faiss_thread():
    """OpenMP spin-waits badly on a busy shared machine; tiny test indexes gain nothing from threads."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)
