"""Embedders, registered by short name."""

from ragcost.embed.base import Embedder, embedder_registry, fingerprint_dir
from ragcost.embed import sentence_transformers as _st  # noqa: F401  (registers the backend)


def make_embedder(config, base=None) -> Embedder:
    cls = embedder_registry.get(config.type)
    return cls(config, base=base) if cls is _st.SentenceTransformersEmbedder else cls(config)


__all__ = ["Embedder", "embedder_registry", "fingerprint_dir", "make_embedder"]
