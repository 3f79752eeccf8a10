"""eval takes the corpus vectors `ragcost index` already stored when the same model made them (#42 item 5): a user's
4,594 chunks were embedded again by eval (13 minutes) right after `index` had embedded them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragcost.evaluate.vectors import embed_corpus
from ragcost.runtime.indexing import EMBEDDER_META, run_index
from ragcost.runtime.pipeline import Pipeline
from tests.cli.conftest import run_cli
from tests.evaluate.conftest import REPO, HashingEmbedder, write_beir, write_spec


@pytest.fixture
def indexed(tmp_path: Path) -> Path:
    """A pipeline whose source is the synthetic BEIR corpus, indexed by `ragcost index`'s library call."""
    data = write_beir(tmp_path / "data" / "synth")
    write_spec(tmp_path, grid=f"grid:\n  - index: {REPO}/indexes/flat.yaml", dims=[64], precisions=["float32"])
    cfg = json.loads((tmp_path / "pipe.yaml").read_text())
    cfg["source"] = {"path": str(data), "reader": "beir"}
    (tmp_path / "pipe.yaml").write_text(json.dumps(cfg))
    pipe = Pipeline.load(tmp_path / "pipe.yaml")
    try:
        run_index(pipe)
    finally:
        pipe.close()
    return tmp_path


@pytest.fixture
def counted(monkeypatch) -> list[int]:
    """How many texts reach the model."""
    seen: list[int] = []
    real = HashingEmbedder.embed_batch

    def embed_batch(self, texts):
        seen.append(len(texts))
        return real(self, texts)

    monkeypatch.setattr(HashingEmbedder, "embed_batch", embed_batch)
    return seen


def _stored(folder: Path) -> dict[str, np.ndarray]:
    pipe = Pipeline.load(folder / "pipe.yaml")
    try:
        labels, texts = pipe.store().chunk_column("text")
        _, vectors = pipe.store().vectors()
        return dict(zip(texts, vectors))
    finally:
        pipe.close()


def test_the_stores_vectors_are_taken_not_embedded_again(indexed, counted):
    stored = _stored(indexed)
    pipe = Pipeline.load(indexed / "pipe.yaml")
    try:
        corpus = embed_corpus(pipe, indexed / "data" / "synth", indexed / "eval")
        _, texts = corpus.pipeline.store().chunk_column("text")
    finally:
        pipe.close()
    assert sum(counted) == 0  # not one chunk reached the model
    assert corpus.summary.vectors_from_store == len(texts) == len(stored)
    for t, v in zip(texts, corpus.vectors):
        assert np.array_equal(v, stored[t])


def test_a_store_another_model_made_is_not_used(indexed, counted):
    pipe = Pipeline.load(indexed / "pipe.yaml")
    try:
        pipe.store().set_meta(EMBEDDER_META, json.dumps({"model": "0" * 64}))  # as if another model had made them
        pipe.close()
        pipe = Pipeline.load(indexed / "pipe.yaml")
        corpus = embed_corpus(pipe, indexed / "data" / "synth", indexed / "eval")
    finally:
        pipe.close()
    assert corpus.summary.vectors_from_store == 0
    assert sum(counted) == len(corpus.labels)  # every chunk embedded by this model


def test_without_a_store_eval_embeds_and_creates_none(tmp_path, counted):
    data = write_beir(tmp_path / "data" / "synth")
    write_spec(tmp_path)
    pipe = Pipeline.load(tmp_path / "pipe.yaml")
    try:
        corpus = embed_corpus(pipe, data, tmp_path / "eval")
    finally:
        pipe.close()
    assert corpus.summary.vectors_from_store == 0 and sum(counted) == len(corpus.labels)
    assert not (tmp_path / "store.duckdb").exists()  # looking for vectors to reuse made no store


def test_eval_says_so(indexed, capsys, monkeypatch):
    monkeypatch.chdir(indexed)
    code, out, err = run_cli(capsys, "eval", indexed / "spec.yaml", "--no-ledger", "--cache-dir", indexed / "eval")
    assert code == 0, err
    assert "chunk vectors taken from the pipeline's store, made by the same model, not embedded again" in out
