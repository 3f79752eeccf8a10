"""The Embedder contract every embedder backend's test class inherits (set the ``embedder`` fixture)."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.embed.base import Embedder

TEXTS = ["how do I reset my password?", "Invoices are PDF files in the billing section.", "東京 café naïve"]


class EmbedderContract:
    """Subclasses provide an ``embedder`` fixture (warm or cold); the base class checks the protocol.

    ``batch_cosine``: None when a text's vector must not depend on the batch it is embedded in (1e-5 per
    component); else the cosine a vector keeps between alone and in a batch, for runtimes whose arithmetic
    the batch changes (dynamic int8 scales activations per batch; bfloat16 rounds sums the padding regroups).
    """

    batch_cosine: float | None = None

    @pytest.fixture
    def embedder(self) -> Embedder:  # pragma: no cover - overridden
        raise NotImplementedError

    def test_is_an_embedder_from_its_registry(self, embedder):
        from ragcost.embed import embedder_registry

        assert isinstance(embedder, Embedder)
        assert type(embedder) is embedder_registry.get(embedder.name)

    def test_vectors_are_float32_unit_length_at_the_native_dimension(self, embedder):
        v = embedder.embed(TEXTS)
        assert v.dtype == np.float32 and v.shape == (len(TEXTS), embedder.native_dim)
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)

    def test_no_texts_is_an_empty_matrix_of_the_right_width(self, embedder):
        assert embedder.embed([]).shape == (0, embedder.native_dim)

    def test_the_same_text_gets_the_same_vector_alone_or_in_a_batch(self, embedder):
        alone = embedder.embed([TEXTS[1]])[0]
        batch = embedder.embed(TEXTS)[1]
        if self.batch_cosine is None:
            np.testing.assert_allclose(alone, batch, atol=1e-5)
        else:
            assert float(alone @ batch) > self.batch_cosine

    def test_similar_texts_score_higher_than_unrelated_ones(self, embedder):
        a, b, c = embedder.embed(["reset my password", "how do I change my password", "PDF invoices for billing"])
        assert float(a @ b) > float(a @ c)

    def test_fingerprint_is_a_stable_hash_not_a_name(self, embedder):
        fp = embedder.fingerprint()
        assert fp == embedder.fingerprint() and len(fp) >= 32 and all(ch in "0123456789abcdef" for ch in fp)

    def test_token_counts_and_window_are_known(self, embedder):
        counts = embedder.count_tokens(TEXTS)
        assert len(counts) == len(TEXTS) and all(n > 0 for n in counts)
        assert embedder.max_tokens > 8
