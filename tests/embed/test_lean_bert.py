"""The query path's lean BERT encoder: sentence-transformers' vectors and token counts, without its import."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragcost.config.pipeline import EmbedConfig
from ragcost.embed.lean_bert import LeanBert, applies
from ragcost.embed.sentence_transformers import SentenceTransformersEmbedder

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def texts(shared_data) -> list[str]:
    """Real texts of every length: SciFact's claims (short) and abstracts (many past the model's 256-token window)."""
    queries = [json.loads(line)["text"] for line in (shared_data / "scifact" / "queries.jsonl").open(encoding="utf-8")][:80]
    with gzip.open(shared_data / "scifact" / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for _, line in zip(range(40), f)]
    return queries + docs + ["", "x", "naïve café — déjà vu 東京"]


def test_the_packaged_model_is_run_and_its_vectors_and_counts_are_sentence_transformers(minilm_path, texts):
    assert applies(Path(minilm_path)) is None
    st = SentenceTransformersEmbedder(EmbedConfig(model=minilm_path, batch_size=32))
    want = st.embed(texts)
    lean = LeanBert(Path(minilm_path))
    got = lean.embed(texts, 32)
    assert got.shape == want.shape and got.dtype == np.float32
    assert float(np.abs(got - want).max()) < 1e-5
    assert lean.count_tokens(texts) == st.count_tokens(texts)
    assert lean.max_tokens == st.max_tokens and lean.hidden == st.native_dim
    # one at a time as a query process embeds: the same vector as in a batch
    np.testing.assert_allclose(lean.embed(texts[:1]), want[:1], atol=1e-5)


def _copy(minilm_path: str, tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(minilm_path, folder)
    return folder


@pytest.mark.parametrize("change, why", [
    (lambda f: (f / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 384, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False})), "pooling"),
    (lambda f: (f / "config.json").write_text(json.dumps(
        {**json.loads((f / "config.json").read_text()), "model_type": "roberta"})), "model_type 'roberta'"),
    (lambda f: (f / "modules.json").write_text(json.dumps(json.loads((f / "modules.json").read_text())[:2])), "modules"),
    (lambda f: (f / "model.safetensors").unlink(), "no model.safetensors"),
])
def test_another_kind_of_model_is_left_to_sentence_transformers(minilm_path, tmp_path, change, why):
    folder = _copy(minilm_path, tmp_path)
    change(folder)
    assert why in (applies(folder) or "")


def test_a_query_embedder_loads_the_lean_path_and_bfloat16_keeps_sentence_transformers(minilm_path):
    lean = SentenceTransformersEmbedder(EmbedConfig(model=minilm_path))
    lean.warm_up_queries()
    assert lean._lean is not None and lean._model is None
    bf16 = SentenceTransformersEmbedder(EmbedConfig(model=minilm_path, dtype="bfloat16"))
    assert bf16.lean_refusal() == "embed.dtype bfloat16"
    bf16.warm_up_queries()
    assert bf16._lean is None and bf16._model is not None
    # loaded beside the full model (an eval embeds its corpus with one and prices queries with the other)
    both = SentenceTransformersEmbedder(EmbedConfig(model=minilm_path))
    both.warm_up()
    both.warm_up_queries()
    assert both._lean is not None and both._model is not None
    q = ["how does the with statement call __exit__?"]
    np.testing.assert_allclose(both.embed_queries(q), both.embed(q), atol=1e-5)


def test_a_query_process_never_imports_sentence_transformers(minilm_path):
    # what the cold `ragcost query` gains: sentence-transformers' import (torch, transformers, scipy, sympy, pandas)
    code = (
        "import sys\n"
        "from ragcost.config.pipeline import EmbedConfig\n"
        "from ragcost.embed.sentence_transformers import SentenceTransformersEmbedder\n"
        "from ragcost.stages.embed import EmbedQueries\n"
        "from ragcost.records import QueryState, UsageRecord\n"
        f"emb = SentenceTransformersEmbedder(EmbedConfig(model={minilm_path!r}))\n"
        "class Ctx: embedder = emb; dim = 384\n"
        "st = EmbedQueries(EmbedQueries.Params(), Ctx())\n"
        "st.warm_up()\n"
        "[s] = st.run([QueryState(text='what is a context manager', id='q')], UsageRecord(stage='embed', resource='cpu'))\n"
        "print(len(s.vector), 'sentence_transformers' in sys.modules, 'transformers' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["384", "False", "False"]
