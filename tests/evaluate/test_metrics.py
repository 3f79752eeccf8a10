from __future__ import annotations

import numpy as np
import pytest

from ragcost.evaluate.metrics import ann_recall, binary, evaluate, exact_kth


class TestEvaluate:
    QRELS = {"a": {"d1": 3, "d2": 1, "d3": 0}, "b": {"d9": 1}}

    def test_metrics_match_hand_computed_values(self):
        means, per = evaluate({"a": ["d2", "d1", "d3"], "b": ["d8", "d9"]}, self.QRELS,
                              ["ndcg@10", "recall@1", "mrr@10", "precision@2"])
        dcg = 1 / np.log2(2) + 3 / np.log2(3)
        idcg = 3 / np.log2(2) + 1 / np.log2(3)
        assert per["ndcg@10"]["a"] == pytest.approx(dcg / idcg)
        assert per["mrr@10"]["b"] == pytest.approx(0.5)
        assert per["recall@1"]["a"] == pytest.approx(0.5)
        assert means["precision@2"] == pytest.approx((1.0 + 0.5) / 2)

    def test_our_order_is_kept_even_when_doc_ids_would_sort_otherwise(self):
        _, per = evaluate({"a": ["d3", "d1"]}, {"a": {"d1": 1}}, ["mrr@10"])
        assert per["mrr@10"]["a"] == pytest.approx(0.5)

    def test_a_judged_query_without_results_counts_zero(self):
        means, per = evaluate({"a": ["d1"]}, self.QRELS, ["ndcg@10"])
        assert per["ndcg@10"]["b"] == 0.0 and means["ndcg@10"] == pytest.approx(per["ndcg@10"]["a"] / 2)

    def test_graded_ndcg_differs_from_binary(self):
        run = {"a": ["d2", "d1"]}
        graded, _ = evaluate(run, self.QRELS, ["ndcg@10"])
        flat, _ = evaluate(run, binary(self.QRELS), ["ndcg@10"])
        assert graded["ndcg@10"] < flat["ndcg@10"]


class TestAnnRecall:
    def test_exact_kth_is_the_best_chunk_per_document(self, clustered):
        vecs, _ = clustered(300, 16, seed=3)
        doc_of = np.arange(300) // 3  # 3 chunks per document
        q = vecs[:7] + 0.01
        kth = exact_kth(q, vecs, doc_of, [1, 5])
        docs = np.stack([(q @ vecs[doc_of == d].T).max(axis=1) for d in range(100)], axis=1)
        assert np.allclose(kth[5], np.sort(docs, axis=1)[:, -5])
        assert np.allclose(kth[1], docs.max(axis=1))

    def test_ties_at_the_kth_score_count_as_found(self):
        assert ann_recall([np.array([0.9, 0.5])], np.array([0.5]), k=2, n_docs=10) == 1.0
        assert ann_recall([np.array([0.9, 0.4])], np.array([0.5]), k=2, n_docs=10) == 0.5
        assert ann_recall([np.array([0.9])], np.array([0.5]), k=2, n_docs=10) == 0.5  # too few returned
