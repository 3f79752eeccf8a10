"""Every built-in embedder passes the Embedder contract."""

from __future__ import annotations

import pytest

from ragcost.config.pipeline import EmbedConfig
from ragcost.embed import make_embedder
from ragcost.testing.embedder import EmbedderContract


@pytest.fixture(scope="module")
def minilm():
    emb = make_embedder(EmbedConfig(model="all-MiniLM-L6-v2", device="cpu", batch_size=8))
    emb.warm_up()
    return emb


class TestSentenceTransformersEmbedder(EmbedderContract):
    @pytest.fixture
    def embedder(self, minilm):
        return minilm
