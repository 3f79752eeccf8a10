"""On Cranfield's graded judgments (1-4), graded nDCG is not the binary one: the grades matter.

Embedded with the fastest runtime that reproduces torch's nDCG (tests/conftest.py ``fastest_runtime``; SciFact's
integration test checks that it does): the claim is about the judgments, not the runtime, and torch float32 took
2-3x as long. The held-out judge test (test_expected_heldout.py) reads the same cached vectors."""

from __future__ import annotations

import json

import pytest

from ragcost.evaluate.run import run_eval
from ragcost.evaluate.spec import load_spec
from tests.conftest import fastest_runtime
from tests.evaluate.conftest import REPO


@pytest.mark.slow
def test_graded_ndcg_on_cranfield_differs_from_binary_relevance(shared_data, tmp_path):
    dataset = shared_data / "cranfield"
    spec = tmp_path / "cranfield.yaml"
    body = (f"pipeline: {REPO}/pipelines/cranfield.yaml\ndataset: {dataset}\nk: [10]\n"
            f"embedders: [{json.dumps(fastest_runtime())}]\nserved_rounds: 1\ngrid:\n  - index: {REPO}/indexes/flat.yaml\n")
    spec.write_text(body)
    cache = REPO / ".ragcost" / "eval"  # the eval cache: Cranfield is embedded once per clone (the held-out test reads it)
    graded = run_eval(load_spec(spec), cache, traffic="64")  # quality only is read: the served path in batches, timed once
    spec.write_text(body + "relevance: binary\n")
    flat = run_eval(load_spec(spec), cache, traffic="64")
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
