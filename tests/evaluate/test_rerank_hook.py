from __future__ import annotations

import time

import numpy as np
import pytest

from ragcost.evaluate.run import run_eval
from ragcost.evaluate.spec import load_spec
from ragcost.stages.base import Stage, StageParams, stage_registry
from tests.evaluate.conftest import REPO, write_beir, write_spec

SEEN: dict = {}


class ExactRescoreParams(StageParams):
    type: str = "rescore"
    top_n: int = 10


class FakeRerank(Stage):
    """Re-scores hits exactly on the artifact's float32 vectors, the way a rescore backend would."""

    type = "rerank"
    Params = ExactRescoreParams

    def run(self, batch, usage):
        # A stage with real cost, so pricing it shows above search-time noise: 20 ms of CPU a batch (eval prices the
        # CPU a call uses; a sleep used none, and on a busy machine the plain run's noise outweighed the dot products).
        t0 = time.process_time()
        while time.process_time() - t0 < 0.02:
            pass
        art = self.ctx.artifact()
        SEEN.update(dim=self.ctx.dim, vectors=art.vectors.shape, hits=len(batch[0].hits), text=batch[0].hits[0].text)
        for s in batch:
            rows = np.searchsorted(art.labels, [h.label for h in s.hits])
            scores = art.vectors[rows] @ s.vector
            for h, sc in zip(s.hits, scores):
                h.score = float(sc)
            s.hits = sorted(s.hits, key=lambda h: -h.score)[: self.params.top_n]
        return batch


@pytest.fixture
def rerank_registered(monkeypatch):
    monkeypatch.setitem(stage_registry._items, "rerank", FakeRerank)


class TestRerankHook:
    def test_the_registered_rerank_stage_runs_over_retrieved_hits(self, tmp_path, rerank_registered):
        write_beir(tmp_path / "data" / "synth")
        grid = (f"grid:\n  - index: {REPO}/indexes/ivfpq-m24.yaml\n"
                f"  - index: {REPO}/indexes/ivfpq-m24.yaml\n    rerank: {{type: rescore, top_n: 10}}\n    candidates: 30")
        spec = write_spec(tmp_path, grid=grid, dims=[48], precisions=["float32"])
        run = run_eval(load_spec(spec), tmp_path / "cache")
        by = {r.name: r for r in run.ok()}
        assert set(by) == {"ivfpq-m24 d48 f32", "ivfpq-m24+rescore d48 f32"}
        assert SEEN["dim"] == 48 and SEEN["vectors"][1] == 48 and SEEN["hits"] == 30 and SEEN["text"]
        plain, reranked = by["ivfpq-m24 d48 f32"], by["ivfpq-m24+rescore d48 f32"]
        assert reranked.rerank == {"type": "rescore", "top_n": 10}
        assert reranked.metrics["ndcg@10"] != plain.metrics["ndcg@10"]  # the stage re-ordered the documents
        assert reranked.total_usd > plain.total_usd  # its (20 ms of CPU a batch) time is priced too

    def test_rerank_params_are_validated_with_file_and_line(self, tmp_path, rerank_registered):
        from ragcost.errors import ConfigError

        write_beir(tmp_path / "data" / "synth")
        grid = f"grid:\n  - index: {REPO}/indexes/flat.yaml\n    rerank: {{type: rescore, depth: 3}}"
        with pytest.raises(ConfigError, match=r"spec\.yaml:\d+:\d+: grid\.0\.rerank\.depth: unknown key"):
            load_spec(write_spec(tmp_path, grid=grid))


class TestRealRerankStage:
    def test_the_rescore_backend_runs_in_the_grid(self, tmp_path):
        from ragcost.stages.base import stage_registry

        import ragcost.stages  # noqa: F401

        if "rerank" not in stage_registry:
            pytest.skip("this install has no rerank stage")
        write_beir(tmp_path / "data" / "synth")
        grid = (f"grid:\n  - index: {REPO}/indexes/flat.yaml\n    precisions: [int8]\n"
                f"  - index: {REPO}/indexes/flat.yaml\n    precisions: [int8]\n    rerank: {{type: rescore, top_n: 10}}\n    candidates: 20")
        run = run_eval(load_spec(write_spec(tmp_path, grid=grid, dims=[64, 32])), tmp_path / "cache")
        by = {r.name: r for r in run.ok()}
        assert {"flat+rescore d64 int8", "flat+rescore d32 int8"} <= set(by), [r.reason for r in run.results]
        for d in (64, 32):
            assert by[f"flat+rescore d{d} int8"].p95_ms >= 0 and by[f"flat+rescore d{d} int8"].useful > 0
