"""The Reranker contract every rerank backend's test class inherits (set ``reranker`` and ``batch``)."""

from __future__ import annotations

import math

import pytest

from ragcost.records import QueryState, UsageRecord
from ragcost.stages.rerank.base import Reranker, reranker_registry

SCALES = ("cosine", "probability", "logit", "rrf")


class RerankerContract:
    """Subclasses provide ``reranker`` (warmed up) and ``batch`` (query states holding retrieved hits)."""

    adds_hits = False  # hybrid fuses BM25 documents in

    @pytest.fixture
    def reranker(self) -> Reranker:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def batch(self) -> list[QueryState]:  # pragma: no cover - overridden
        raise NotImplementedError

    def test_comes_from_the_registry_and_says_what_its_scores_mean(self, reranker):
        assert type(reranker) is reranker_registry.get(reranker.name)
        assert reranker.score_scale in SCALES

    def test_every_hit_gets_a_finite_score_and_the_call_reports_its_work(self, reranker, batch):
        before = [{h.doc_id for h in s.hits} for s in batch]
        usage = UsageRecord(stage="rerank", resource="cpu", items=len(batch))
        reranker.rerank(batch, usage)
        for s, docs in zip(batch, before):
            assert s.hits and all(isinstance(h.score, float) and math.isfinite(h.score) for h in s.hits)
            if not self.adds_hits:
                assert {h.doc_id for h in s.hits} == docs
        rep = usage.notes["rerank"]
        assert isinstance(rep["scored"], int) and rep["scored"] > 0 and isinstance(rep["batches"], int)

    def test_params_refuse_unknown_keys(self, reranker):
        with pytest.raises(Exception, match="xyz"):
            type(reranker).Params.model_validate({"xyz": 1})
