"""The route stage and its routers (rules, knn, context_length), escalation, and the load-time checks."""

from __future__ import annotations

import json
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from ragcost.errors import ConfigError
from ragcost.records import Hit, QueryState, UsageRecord
from ragcost.runtime.load import load_pipeline
from ragcost.runtime.runner import Runner
from ragcost.stages.base import stage_registry
from ragcost.stages.route import Route
from ragcost.stages.route.examples import read_examples
from ragcost.stages.route.knn import knn_scores
from tests.cli.conftest import write_pipeline
from ragcost.testing.router import RouterContract
from ragcost.testing.stage import StageContract
from tests.generate.helpers import book, book_path  # noqa: F401

DIM = 64


class WordEmbedder:
    """Bag of hashed words, L2-normalised: similar wording, similar vector (no model to load)."""

    def embed(self, texts):
        out = np.zeros((len(texts), DIM), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().replace("?", " ").split():
                out[i, zlib.crc32(w.encode()) % DIM] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


EXAMPLES = [("what is a tuple", "small"), ("what does pass do", "small"), ("what is a lambda", "small"),
            ("compare tuples and lists and explain when each is better", "large"),
            ("explain the difference between generators and iterators and how they interact", "large"),
            ("compare with statements and try finally and why both exist", "large")]


@pytest.fixture
def ctx(book, tmp_path):
    ex = tmp_path / "labelled.jsonl"
    ex.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in EXAMPLES))
    return SimpleNamespace(resource="cpu", price_book=book, path=tmp_path / "p.yaml", base=tmp_path,
                           embedder=WordEmbedder(), dim=DIM)


def query(text: str, i: int = 0, hits=None) -> QueryState:
    s = QueryState(text=text, id=f"q{i}", hits=hits or [])
    s.vector = WordEmbedder().embed([text])[0]
    return s


def route(ctx, **params) -> Route:
    st = Route(Route.Params(**params), ctx)
    st.warm_up()
    return st


def run(stage, batch):
    stage.run(batch, UsageRecord(stage=stage.name, resource="cpu", items=len(batch)))
    return batch


class TestRouteStage(StageContract):
    @pytest.fixture
    def stage(self, ctx):
        return route(ctx, router="knn", default="large", examples="labelled.jsonl")

    @pytest.fixture
    def batch(self):
        return [query("what is a tuple", 0), query("compare lists and tuples and explain why", 1)]


HITS2 = [Hit(1, "d1", 0.82, "t", "x" * 400), Hit(2, "d2", 0.60, "t", "y" * 400)]


def contract_batch():
    return [query("what is a tuple", 0, list(HITS2)), query("compare generators and iterators and explain why", 1, list(HITS2)),
            query("zebra quantum mortgage", 2)]


class TestKnnContract(RouterContract):
    @pytest.fixture
    def router(self, ctx):
        return route(ctx, router="knn", default="large", examples="labelled.jsonl", k=3, min_similarity=0.5).router

    @pytest.fixture
    def batch(self):
        return contract_batch()


class TestRulesContract(RouterContract):
    @pytest.fixture
    def router(self, ctx):
        return route(ctx, router="rules", default="large", rules=[{"target": "small", "top_score_min": 0.8}]).router

    @pytest.fixture
    def batch(self):
        return contract_batch()


class TestContextLengthContract(RouterContract):
    @pytest.fixture
    def router(self, ctx):
        return route(ctx, router="context_length", default="long",
                     buckets=[{"max_tokens": 300, "target": "short"}, {"max_tokens": 400, "target": "long"}]).router

    @pytest.fixture
    def batch(self):
        return contract_batch()


class TestKnn:
    def test_a_lookup_goes_small_and_a_comparison_goes_large_with_score_and_reason(self, ctx):
        a, b = run(route(ctx, router="knn", default="large", examples="labelled.jsonl", k=3, threshold=0.5),
                   [query("what is a tuple", 0), query("compare generators and iterators and explain why", 1)])
        assert (a.route, b.route) == ("small", "large")
        assert a.outcome == "branched" and a.routes == ["small"]
        assert a.decision["score"] < 0.5 <= b.decision["score"]
        assert "threshold 0.5" in a.decision["reason"] and a.decision["default"] is False

    def test_no_example_within_min_similarity_uses_the_default_and_says_so(self, ctx):
        (s,) = run(route(ctx, router="knn", default="large", examples="labelled.jsonl", min_similarity=0.9),
                   [query("zebra quantum mortgage", 0)])
        assert s.route == "large" and s.decision["default"] is True
        assert s.route_fields()["route_reason"].startswith("undecided (no example within min_similarity 0.9")

    def test_scores_are_the_weighted_share_of_large_votes(self):
        ex = np.eye(3, dtype=np.float32)
        score, near = knn_scores(np.array([[1, 0, 0], [0, 0, 1]], np.float32), ex, np.array([0, 1, 1], np.float32), 1, 0.5)
        assert score.tolist() == [0.0, 1.0] and near.tolist() == [1.0, 1.0]
        score, _ = knn_scores(np.array([[0.6, 0.8, 0]], np.float32), ex, np.array([0, 1, 1], np.float32), 2, 0.0)
        assert score[0] == pytest.approx(0.8 / 1.4)


class TestLabelledFile:
    def test_an_unknown_label_names_file_and_line(self, tmp_path):
        p = tmp_path / "l.jsonl"
        p.write_text('{"text": "a", "label": "small"}\n{"text": "b", "label": "medium"}\n')
        with pytest.raises(ConfigError, match=rf"{p}:2: unknown label 'medium'; use one of the route targets: small, large"):
            read_examples(p, ["small", "large"])

    def test_an_empty_text_names_file_and_line(self, tmp_path):
        p = tmp_path / "l.jsonl"
        p.write_text('{"text": "a", "label": "small"}\n\n{"text": "  ", "label": "large"}\n')
        with pytest.raises(ConfigError, match=rf"{p}:3: empty text"):
            read_examples(p, ["small", "large"])


class TestRules:
    HITS = [Hit(1, "d1", 0.82, "t", "x" * 400), Hit(2, "d2", 0.60, "t", "y" * 400)]

    def test_the_first_matching_rule_decides(self, ctx):
        st = route(ctx, router="rules", default="large", rules=[
            {"target": "large", "regex": r"\b(compare|difference)\b"},
            {"target": "small", "top_score_min": 0.8, "margin_min": 0.1}])
        a, b, c = run(st, [query("compare x and y", 0, list(self.HITS)), query("what is x", 1, list(self.HITS)),
                           query("what is y", 2, [Hit(1, "d1", 0.5, "t", "z")])])
        assert (a.route, b.route, c.route) == ("large", "small", "large")
        assert a.decision["reason"].startswith("rule 0: regex")
        assert "top_score 0.82 >= 0.8" in b.decision["reason"] and b.decision["score"] == 0.82
        assert c.decision["default"] and "no rule matched" in c.decision["reason"]

    def test_context_tokens_count_the_retrieved_chunks(self, ctx):
        st = route(ctx, router="rules", default="small", rules=[{"target": "large", "context_tokens_min": 150}])
        (s,) = run(st, [query("q", 0, list(self.HITS))])
        assert s.route == "large" and "context_tokens 200 >= 150" in s.decision["reason"]

    def test_a_bad_regex_is_refused(self, ctx):
        with pytest.raises(Exception, match=r"regex '\(' does not compile"):
            Route.Params(router="rules", default="large", rules=[{"target": "large", "regex": "("}])


class TestContextLength:
    def test_buckets_by_prompt_tokens(self, ctx):
        st = route(ctx, router="context_length", default="long", output_tokens=100,
                   buckets=[{"max_tokens": 200, "target": "short"}, {"max_tokens": 1000, "target": "long"}])
        short, long_, over = run(st, [query("q" * 40, 0), query("q", 1, [Hit(1, "d", 0.5, "t", "w" * 2000)]),
                                      query("q", 2, [Hit(1, "d", 0.5, "t", "w" * 9000)])])
        assert (short.route, long_.route) == ("short", "long") and short.decision["score"] == 110
        assert over.route == "long" and over.decision["default"]

    def test_buckets_must_grow(self):
        with pytest.raises(Exception, match="must grow"):
            Route.Params(router="context_length", default="a", buckets=[{"max_tokens": 9, "target": "a"}, {"max_tokens": 3, "target": "b"}])

    def test_an_unknown_router_lists_the_installed_ones(self):
        with pytest.raises(Exception, match=r"unknown router 'llm'; installed: context_length, knn, rules"):
            Route.Params(router="llm", default="a")


def _targets(**small):
    dead = {"backend": "vllm", "base_url": "http://127.0.0.1:9/v1", "model": "m", "resource": "small-llm",
            "connect_timeout_s": 0.5, "retry": {"attempts": 1}}
    return [{"type": "generate", "target": "small", **(small or {"backend": "extractive", "resource": "small-llm"})},
            {"type": "generate", "target": "large", "backend": "extractive", "resource": "tiny-llm"}], dead


class TestTargetsAndEscalation:
    def stages(self, ctx, specs):
        return [stage_registry.get(sp["type"])(stage_registry.get(sp["type"]).Params(**{k: v for k, v in sp.items() if k != "type"}), ctx)
                for sp in specs]

    def test_each_query_runs_only_the_generate_stage_of_its_target(self, ctx):
        gens, _ = _targets()
        st = self.stages(ctx, [{"type": "route", "router": "knn", "default": "large", "examples": "labelled.jsonl", "k": 3}, *gens])
        hits = [Hit(1, "d", 0.9, "Tuples", "A tuple is an immutable sequence.")]
        batch = [query("what is a tuple", 0, list(hits)), query("compare generators and iterators and explain why", 1, list(hits))]
        res = Runner(st, ctx.price_book).run(batch)
        by_query = {s.id: {c.record.stage for c in res.calls_for(s)} for s in batch}
        assert "generate:small" in by_query["q0"] and "generate:large" not in by_query["q0"]
        assert "generate:large" in by_query["q1"] and "generate:small" not in by_query["q1"]
        assert all(s.answer for s in batch)

    def test_a_failing_small_target_escalates_to_large_and_both_are_priced(self, ctx):
        gens, dead = _targets()
        gens[0].update(dead, escalate_to="large")
        st = self.stages(ctx, [{"type": "route", "router": "rules", "default": "small", "rules": [{"target": "large", "regex": "never"}]}, *gens])
        for g in st[1:]:
            g.warm_up()
        (s,) = batch = [query("what is a tuple", 0, [Hit(1, "d", 0.9, "Tuples", "A tuple is an immutable sequence.")])]
        res = Runner(st, ctx.price_book).run(batch)
        assert s.ok and s.answer and s.routes == ["small", "large"] and s.route == "large"
        failed = [c for c in res.calls_for(s) if c.record.stage == "generate:small" and c.record.failures]
        assert failed and failed[0].record.resource == "small-llm"
        assert any(c.record.stage == "generate:large" and not c.record.failures for c in res.calls_for(s))
        f = s.route_fields()
        assert f["route_path"] == "small>large" and "escalated small>large: every backend of 'generate:small' failed" in f["route_reason"]

    def test_a_grounded_flag_on_the_small_answer_escalates(self, ctx):
        gens, _ = _targets()
        guard = {"type": "guard", "target": "small", "on": "answer", "checks": ["grounded"], "escalate_to": "large"}
        st = self.stages(ctx, [{"type": "route", "router": "rules", "default": "small", "rules": [{"target": "large", "regex": "never"}]},
                               gens[0], guard, gens[1]])
        (s,) = batch = [query("what is a tuple", 0, [Hit(1, "d", 0.9, "Tuples", "A tuple is an immutable sequence.")])]
        # The small target "answers" with something its context does not support.
        st[1].run = lambda b, u: [setattr(x, "answer", "Bananas orbit Jupiter every Tuesday [1].") or setattr(x, "citations", ["d"]) for x in b] and b
        Runner(st, ctx.price_book).run(batch)
        assert s.routes == ["small", "large"] and s.ok and "Bananas" not in (s.answer or "")
        assert "guard grounded" in s.route_fields()["route_reason"]


    def test_an_escalating_guard_names_the_target_it_checks(self):
        from ragcost.stages.guard import GuardStage

        with pytest.raises(Exception, match="escalate_to: large needs target:"):
            GuardStage.Params(on="answer", checks=["grounded"], escalate_to="large")
        with pytest.raises(Exception, match="needs on: answer"):
            GuardStage.Params(on="query", target="small", checks=["pii"], escalate_to="large")


class TestLoadChecks:
    def load(self, tmp_path, stages):
        (tmp_path / "labelled.jsonl").write_text('{"text": "what is a tuple", "label": "small"}\n{"text": "compare", "label": "large"}\n')
        return load_pipeline(write_pipeline(tmp_path, stages=stages))

    def test_a_route_to_a_missing_target_is_refused_with_file_line(self, tmp_path):
        gens, _ = _targets()
        with pytest.raises(ConfigError, match=r"kb\.yaml:\d+:\d+: stages\.0\.default: route target 'huge' is not declared; .*small, large"):
            self.load(tmp_path, [{"type": "route", "router": "knn", "default": "huge", "examples": "labelled.jsonl"}, *gens])
        with pytest.raises(ConfigError, match=r"kb\.yaml:\d+:\d+: stages\.0\.rules\.0\.target: route target 'xl'"):
            self.load(tmp_path, [{"type": "route", "router": "rules", "default": "large", "rules": [{"target": "xl"}]}, *gens])

    def test_a_labelled_file_with_an_unknown_label_is_refused_at_load_with_its_file_line(self, tmp_path):
        gens, _ = _targets()
        (tmp_path / "bad.jsonl").write_text('{"text": "a", "label": "small"}\n{"text": "b", "label": "xl"}\n')
        with pytest.raises(ConfigError, match=r"bad\.jsonl:2: unknown label 'xl'"):
            self.load(tmp_path, [{"type": "route", "router": "knn", "default": "large", "examples": "bad.jsonl"}, *gens])
        with pytest.raises(ConfigError, match=r"kb\.yaml:\d+:\d+: stages\.0\.examples: labelled file 'nope.jsonl' not found"):
            self.load(tmp_path, [{"type": "route", "router": "knn", "default": "large", "examples": "nope.jsonl"}, *gens])

    def test_targets_escalation_and_order_are_checked(self, tmp_path):
        gens, _ = _targets()
        with pytest.raises(ConfigError, match=r"stages\.0\.target: 'small' needs a route stage before it"):
            self.load(tmp_path, gens)
        with pytest.raises(ConfigError, match=r"stages\.1\.escalate_to: no generate stage has target 'xl'"):
            self.load(tmp_path, [{"type": "route", "router": "knn", "default": "large", "examples": "labelled.jsonl"},
                                 {**gens[0], "escalate_to": "xl"}, gens[1]])
        with pytest.raises(ConfigError, match=r"stages\.2\.escalate_to: the generate stage of 'small' \(stages\.1\) must come after"):
            self.load(tmp_path, [{"type": "route", "router": "knn", "default": "large", "examples": "labelled.jsonl"},
                                 gens[0], {**gens[1], "escalate_to": "small"}])

    def test_a_routed_pipeline_loads(self, tmp_path):
        gens, _ = _targets()
        lp = self.load(tmp_path, [{"type": "retrieve", "k": 3},
                                  {"type": "route", "router": "knn", "default": "large", "examples": "labelled.jsonl"}, *gens])
        assert [p.target for _, p in lp.stage_specs[2:]] == ["small", "large"]
