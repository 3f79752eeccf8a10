"""The cache's parts on their own: normaliser, keys, the Wilson bound, the learner, eviction order, params."""

from __future__ import annotations

import json

import pytest

from ragcost.cache import Normaliser, ThresholdLearner, exact_key, scope_key, wilson_upper
from ragcost.cache.backends import to_evict
from ragcost.cache.basis import same_basis
from ragcost.stages.cache import CacheParams


class TestNormaliser:
    def test_folds_case_space_width_and_trailing_punctuation(self):
        n = Normaliser()
        assert n("  How do I  ＲＥＳＥＴ my password?! ") == n("how do i reset my password")

    def test_each_rule_can_be_switched_off(self):
        assert Normaliser(casefold=False)("Reset") != Normaliser(casefold=False)("reset")
        assert Normaliser(trailing_punctuation=False)("reset?") != Normaliser(trailing_punctuation=False)("reset")


class TestKeys:
    def test_tenant_and_filter_change_the_scope(self):
        v = {"embedder": "a"}
        base = scope_key(v, None, None)
        assert scope_key(v, None, "acme") != base
        assert scope_key(v, {"year": 2024}, None) != base
        assert scope_key(v, {"a": 1, "b": 2}, None) == scope_key(v, {"b": 2, "a": 1}, None)

    def test_exact_key_depends_on_scope_and_text(self):
        assert exact_key("s1", "q") != exact_key("s2", "q") != exact_key("s1", "r")


class TestBound:
    def test_wilson_upper_matches_known_values(self):
        assert wilson_upper(0, 0, 0.95) == 1.0
        assert wilson_upper(0, 100, 0.95) == pytest.approx(0.0370, abs=1e-3)
        assert wilson_upper(5, 100, 0.95) == pytest.approx(0.1118, abs=1e-3)

    def test_thin_evidence_is_never_trusted(self):
        learner = ThresholdLearner(0.05, 0.95)
        for _ in range(20):
            learner.add("e", 0.95, True)
        assert not learner.trusted("e", 0.99)  # 0/20 wrong still has an upper bound of 16%

    def test_enough_correct_evidence_above_a_similarity_is_trusted_there_only(self):
        learner = ThresholdLearner(0.05, 0.95, min_entry_evidence=10_000)
        for i in range(200):
            learner.add(f"e{i}", 0.9 + (i % 10) / 100, True)
        for i in range(50):
            learner.add(f"w{i}", 0.82, False)
        assert learner.trusted("new", 0.95)
        assert not learner.trusted("new", 0.85)

    def test_an_entry_once_wrong_is_not_trusted_at_or_below_that_similarity(self):
        learner = ThresholdLearner(0.05, 0.95)
        for i in range(300):
            learner.add(f"e{i}", 0.95, True)
        learner.add("bad", 0.97, False)
        assert learner.trusted("e1", 0.96) and not learner.trusted("bad", 0.96)


def test_eviction_drops_least_value_first_not_oldest():
    rows = [{"id": "old-valuable", "size_bytes": 100, "hit_count": 50, "cost": 10.0, "created_at": 1.0},
            {"id": "new-worthless", "size_bytes": 100, "hit_count": 0, "cost": 1.0, "created_at": 9.0},
            {"id": "mid", "size_bytes": 100, "hit_count": 2, "cost": 10.0, "created_at": 5.0}]
    assert to_evict(rows, 200) == ["new-worthless"]
    assert to_evict(rows, 100) == ["new-worthless", "mid"]


def test_same_basis_needs_cited_documents_in_the_fresh_context():
    assert same_basis(["a", "b", "c"], ["a"], ["a", "b", "c"], 1.0)
    assert not same_basis(["a", "b", "c"], ["a"], ["b", "c", "d"], 0.5)
    assert not same_basis(["a", "b", "c"], [], ["a", "b", "d"], 1.0)


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5])
def test_a_false_hit_rate_outside_the_open_unit_interval_is_refused(bad):
    with pytest.raises(ValueError, match="max_false_hit_rate must be in"):
        CacheParams(max_false_hit_rate=bad)


def test_an_unknown_backend_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown cache backend 'memcached'; installed: sql, redis"):
        CacheParams(backend="memcached")


class TestEntryOrigin:
    def _entry(self, **kw):
        import numpy as np

        from ragcost.cache import CacheEntry

        return CacheEntry(scope="s", key="k", text="q", vector=np.ones(4, np.float32), answer="a", citations=["d1"],
                          hits=[{"label": 1, "doc_id": "d1", "score": 0.9}], created_at=1.0, expires_at=2.0, id="e1", **kw)

    def _stored(self, e):
        return {"id": e.id, "scope": e.scope, "key": e.key, "created_at": e.created_at, "expires_at": e.expires_at,
                "payload": e.payload(), "vector": e.vector_bytes(), "checksum": e.checksum()}

    def test_the_miss_that_wrote_an_entry_is_stored_with_it_and_an_entry_without_one_keeps_its_checksum(self):
        from ragcost.cache import CacheEntry

        plain, made = self._entry(), self._entry(origin="0f" * 16)
        assert "origin" not in json.loads(plain.payload())  # an entry written without one: the same bytes as before
        assert CacheEntry.from_stored(self._stored(plain)).origin is None
        assert CacheEntry.from_stored(self._stored(made)).origin == "0f" * 16 and made.checksum() != plain.checksum()
