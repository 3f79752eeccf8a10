"""The Guard contract every guard check's test class inherits (set ``guard``, ``on`` and ``flagged_state``)."""

from __future__ import annotations

import pytest

from ragcost.guards import guard_registry
from ragcost.guards.base import Finding, Guard
from ragcost.records import Hit, QueryState

CLEAN_HITS = [Hit(1, "d1", 0.9, "Refund policy", "Customers can ask for a refund within 30 days of purchase.")]


class GuardContract:
    """Subclasses provide ``guard`` (a built check), ``on`` (a target it supports) and ``flagged_state``
    (a query state the check must find something in)."""

    on = "query"

    @pytest.fixture
    def guard(self) -> Guard:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def flagged_state(self) -> QueryState:  # pragma: no cover - overridden
        raise NotImplementedError

    def clean_state(self) -> QueryState:
        return QueryState(text="how long do I have to ask for a refund?", hits=list(CLEAN_HITS),
                          answer="Customers can ask for a refund within 30 days of purchase [1].", citations=["d1"])

    def test_comes_from_the_registry_and_declares_where_and_what(self, guard):
        assert type(guard) is guard_registry.get(guard.name)
        assert self.on in guard.targets and guard.default_policy in guard.policies
        assert set(guard.policies) <= {"block", "redact", "flag", "drop"}

    def test_one_list_of_findings_per_state_in_order(self, guard, flagged_state):
        batch = [self.clean_state(), flagged_state, self.clean_state()]
        out = guard.check(batch, self.on)
        assert len(out) == 3 and all(isinstance(f, list) for f in out)
        assert out[1], "the flagged state was not flagged"
        for f in out[1]:
            assert isinstance(f, Finding) and f.check == guard.name and f.on == self.on

    def test_finds_nothing_in_a_clean_state(self, guard):
        assert guard.check([self.clean_state()], self.on) == [[]]

    def test_checking_does_not_change_the_state(self, guard, flagged_state):
        before = (flagged_state.text, flagged_state.answer, [h.text for h in flagged_state.hits])
        guard.check([flagged_state], self.on)
        assert (flagged_state.text, flagged_state.answer, [h.text for h in flagged_state.hits]) == before

    def test_redacts_only_when_it_says_it_can(self, guard, flagged_state):
        text = flagged_state.text if self.on == "query" else (flagged_state.answer or "")
        if "redact" in guard.policies:
            assert isinstance(guard.redact(text), str)
        else:
            with pytest.raises(NotImplementedError):
                guard.redact(text)

    def test_params_refuse_unknown_keys(self, guard):
        with pytest.raises(Exception, match="xyz"):
            type(guard).Params.model_validate({"xyz": 1})
