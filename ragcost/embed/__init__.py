"""Embedders, registered by short name."""

from ragcost.embed.base import Embedder, embedder_registry, fingerprint_dir
from ragcost.embed import sentence_transformers as _st  # noqa: F401  (registers the backends)
from ragcost.embed import onnx as _onnx  # noqa: F401
from ragcost.embed import static as _static  # noqa: F401


def make_embedder(config, base=None) -> Embedder:
    """The registered embedder of ``config.type``; ``base`` is the folder relative model paths start from."""
    return embedder_registry.get(config.type)(config, base=base)


__all__ = ["Embedder", "embedder_registry", "fingerprint_dir", "make_embedder"]
