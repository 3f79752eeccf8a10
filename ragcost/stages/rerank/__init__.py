"""Re-ranking: the ``rerank`` stage and its registered backends (cross-encoder, rescore, hybrid)."""

from ragcost.stages.rerank import cross_encoder as _cross_encoder  # noqa: F401  (registers the backend)
from ragcost.stages.rerank import hybrid as _hybrid  # noqa: F401
from ragcost.stages.rerank import rescore as _rescore  # noqa: F401
from ragcost.stages.rerank.base import Reranker, RerankerParams, reranker_registry, sort_hits
from ragcost.stages.rerank.stage import Rerank, RerankParams

__all__ = ["Rerank", "RerankParams", "Reranker", "RerankerParams", "reranker_registry", "sort_hits"]
