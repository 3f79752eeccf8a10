"""On Cranfield's graded judgments (1-4), graded nDCG is not the binary one: the grades matter."""

from __future__ import annotations

import pytest

from ragcost.evaluate.run import run_eval
from ragcost.evaluate.spec import load_spec
from tests.evaluate.conftest import REPO


@pytest.mark.slow
def test_graded_ndcg_on_cranfield_differs_from_binary_relevance(shared_data, tmp_path):
    dataset = shared_data / "cranfield"
    spec = tmp_path / "cranfield.yaml"
    body = (f"pipeline: {REPO}/pipelines/cranfield.yaml\ndataset: {dataset}\nk: [10]\n"
            f"grid:\n  - index: {REPO}/indexes/flat.yaml\n")
    spec.write_text(body)
    cache = REPO / ".ragcost" / "eval"  # the same cache `ragcost eval eval/cranfield-indexes.yaml` fills: embed once
    graded = run_eval(load_spec(spec), cache)
    spec.write_text(body + "relevance: binary\n")
    flat = run_eval(load_spec(spec), cache)
    assert flat.embedded_documents == 0  # the second run reuses the cached vectors
    print(f"cranfield flat d384 nDCG@10 graded {graded.ok()[0].metrics['ndcg@10']:.4f} "
          f"binary {flat.ok()[0].metrics['ndcg@10']:.4f}")
    g, b = graded.ok()[0], flat.ok()[0]
    assert g.metrics["ann_recall@10"] == 1.0
    # Same ranking, so recall, precision and MRR (which count score >= 1) agree; only nDCG's gains differ.
    for m in ("recall@10", "precision@10", "mrr@10"):
        assert g.metrics[m] == pytest.approx(b.metrics[m])
    assert abs(g.metrics["ndcg@10"] - b.metrics["ndcg@10"]) > 0.005
    # Doc 995 is empty in the original collection (skipped at ingest) yet judged for query 125: reported, skipped.
    assert any("125->995" in w for w in graded.warnings)
