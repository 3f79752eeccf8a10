"""The generate stage without a server: params, dispatch through the registry, prompt, extractive answers, accounting."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from ragcost.cost.compute import cost_of
from ragcost.generate import Attempt, BackendParams, Generator, generator_registry
from ragcost.generate.prompt import approx_tokens, build_prompt, cited
from ragcost.generate.accounting import busy_seconds
from ragcost.stages.generate import Generate
from tests.generate.helpers import HITS, book, book_path, make_stage, pipeline, run_stage, states  # noqa: F401


class TestGenerateParams:
    def test_the_default_is_extractive_and_needs_nothing(self):
        assert Generate.Params().backend == "extractive"

    def test_vllm_without_base_url_names_the_fix(self):
        with pytest.raises(ValidationError, match="base_url"):
            Generate.Params(backend="vllm", model="m")

    def test_openai_needs_the_name_of_the_key_variable(self):
        with pytest.raises(ValidationError, match="api_key_env"):
            Generate.Params(backend="openai", model="gpt-4o-mini")

    def test_unknown_fields_are_refused_in_fallbacks_too(self):
        with pytest.raises(ValidationError, match="max_token"):
            Generate.Params(fallback=[{"backend": "extractive", "max_token": 3}])

    def test_an_unknown_backend_lists_the_installed_ones(self):
        with pytest.raises(ValidationError, match=r"unknown generate backend 'gpt'; installed: .*extractive.*vllm-offline"):
            Generate.Params(backend="gpt")
        with pytest.raises(ValidationError, match=r"fallback\.0\.backend"):
            Generate.Params(fallback=[{"backend": "gpt"}])

    def test_the_json_schema_offers_the_installed_backends(self):
        examples = BackendParams.model_json_schema()["properties"]["backend"]["examples"]
        assert {"extractive", "vllm", "openai", "vllm-offline"} <= set(examples)

    def test_a_template_without_placeholders_is_refused(self):
        with pytest.raises(ValidationError, match="context"):
            Generate.Params(template="just {question}")

    def test_a_missing_api_key_fails_at_warm_up_naming_the_variable(self, pipeline, monkeypatch):
        monkeypatch.delenv("RAGCOST_TEST_KEY", raising=False)
        with pytest.raises(Exception, match="RAGCOST_TEST_KEY"):
            make_stage(pipeline, backend="openai", model="m", api_key_env="RAGCOST_TEST_KEY", resource="tiny-llm")

    def test_an_unknown_fallback_resource_fails_at_warm_up(self, pipeline):
        with pytest.raises(Exception, match="no-such-gpu"):
            make_stage(pipeline, fallback=[{"backend": "extractive", "resource": "no-such-gpu"}])


class TestPrompt:
    def test_chunks_are_numbered_in_rank_order_and_cited_back(self):
        p = build_prompt("refund?", HITS, BackendParams())
        assert "[1] Refund policy" in p.user and "[2] Cancel subscription" in p.user
        assert cited("Yes [2], see [1] and [9].", p.sources) == ["kb-7", "kb-1"]

    def test_the_context_budget_drops_whole_chunks_but_keeps_the_first(self):
        p = build_prompt("refund?", HITS, BackendParams(context_tokens=30))
        assert len(p.sources) == 1 and p.dropped == 2
        assert p.context_tokens <= 30
        tiny = build_prompt("refund?", HITS, BackendParams(context_tokens=8))
        assert len(tiny.sources) == 1 and tiny.context_tokens <= 8  # the first chunk, cut to fit

    def test_a_tokenizer_counts_exactly(self, tmp_path):
        from tokenizers import Tokenizer, models, pre_tokenizers

        tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.save(str(tmp_path / "tokenizer.json"))
        p = build_prompt("q", HITS[:1], BackendParams(tokenizer=str(tmp_path)))
        assert p.context_tokens == len(f"[1] Refund policy\n{HITS[0].text}".replace(".", " .").replace("[", " [ ").replace("]", " ] ").split()) + 1

    def test_approx_tokens_is_four_characters_a_token(self):
        assert approx_tokens("abcdefgh") == 2


class TestExtractive:
    def test_answers_with_the_most_relevant_sentences_and_cites_them(self, pipeline):
        st = make_stage(pipeline)
        [s] = states()
        rec, attempts = run_stage(st, [s])
        assert "30 days" in s.answer and "[1]" in s.answer
        assert s.citations[0] == "kb-1"
        assert s.error is None and s.generation["backend"] == "extractive"
        [(state, a)] = attempts
        assert state is s and a.resource == "cpu" and a.failures == 0 and a.input_tokens is None

    def test_no_hits_is_an_answer_that_says_so(self, pipeline):
        st = make_stage(pipeline)
        [s] = states()
        s.hits = []
        run_stage(st, [s])
        assert "No passages" in s.answer and s.citations == []

    def test_streams_the_whole_answer_as_one_event(self, pipeline):
        st = make_stage(pipeline)
        seen = []
        st.on_event = lambda state, kind, text: seen.append((kind, text))
        [s] = states()
        run_stage(st, [s])
        assert [x for x in seen if x[0] == "text"] == [("text", s.answer)]
        kind, sources = seen[0]  # first, which document each [n] cites (for a stream checker: ragcost.serve.gate)
        assert kind == "sources" and set(json.loads(sources)) <= {h.doc_id for h in s.hits} and json.loads(sources)


class TestAccounting:
    def test_busy_seconds_is_the_union_of_spans(self):
        assert busy_seconds([(0, 2), (1, 3), (5, 6)]) == pytest.approx(4)
        assert busy_seconds([]) == 0

    def test_concurrent_attempts_on_a_time_priced_gpu_pay_its_busy_time_once(self, pipeline, book):
        st = make_stage(pipeline, resource="gpu")
        per_state = [[Attempt("extractive", "gpu", start=0.0, end=10.0, ok=True)] for _ in range(4)]
        batch = states(4)
        records = [r for _, r in st.attempt_records(batch, per_state)]
        assert {r.shared_by for r in records} == {4} and {r.wall_seconds for r in records} == {10.0}
        assert sum(cost_of(r, book) for r in records) == pytest.approx(10 * 7.2 / 3600)
        assert len({r.call_id for r in records}) == 1 and [r.busy_share for r in records] == [0.25] * 4

    def test_attempts_pay_their_period_in_proportion_to_their_duration(self, pipeline, book):
        st = make_stage(pipeline, resource="gpu")
        short = Attempt("extractive", "gpu", start=0.0, end=0.0038, ok=False, endpoint="e")
        long_ = Attempt("extractive", "gpu", start=0.0, end=0.088, ok=True, endpoint="e")
        (_, rs), (_, rl) = st.attempt_records(states(2), [[short], [long_]])
        assert rs.busy_share == pytest.approx(0.0038 / 0.0918) and rl.busy_share == pytest.approx(0.088 / 0.0918)
        assert rs.wall_seconds == rl.wall_seconds == pytest.approx(0.088) and rs.call_id == rl.call_id

    def test_two_endpoints_on_one_resource_are_two_busy_periods(self, pipeline):
        st = make_stage(pipeline, resource="gpu")
        a = Attempt("extractive", "gpu", start=0.0, end=1.0, ok=True, endpoint="http://a/v1 model=m")
        b = Attempt("extractive", "gpu", start=0.5, end=2.0, ok=True, endpoint="http://b/v1 model=m")
        (_, ra), (_, rb) = st.attempt_records(states(2), [[a], [b]])
        assert ra.call_id != rb.call_id and (ra.wall_seconds, rb.wall_seconds) == (1.0, 1.5)
        assert ra.busy_share == rb.busy_share == 1.0 and ra.shared_by == rb.shared_by == 1

    def test_an_http_backend_is_its_url_and_model_an_in_process_one_is_its_object(self, pipeline):
        one = Generate(Generate.Params(backend="vllm", base_url="http://127.0.0.1:1/v1/", model="m",
                                       fallback=[{"backend": "vllm", "base_url": "http://127.0.0.1:1/v1", "model": "m", "label": "again"},
                                                 {"backend": "extractive"}, {"backend": "extractive"}]), pipeline)
        e = [g.endpoint for g in one.generators]
        assert e[0] == e[1] == "http://127.0.0.1:1/v1 model=m" and e[2] != e[3]

    def test_attempt_records_name_the_served_model_and_the_genai_operation(self, pipeline):
        st = make_stage(pipeline, backend="vllm", base_url="http://127.0.0.1:1/v1", model="served-7b",
                        fallback=[{"backend": "vllm", "base_url": "http://127.0.0.1:1/v1", "model": "small-1b",
                                   "api": "completions"}, {"backend": "extractive"}])
        atts = [Attempt("x", "cpu", position=i, start=i, end=i + 1, ok=True) for i in range(3)]
        recs = [r for _, r in st.attempt_records(states(1), [atts])]
        assert [r.stage for r in recs] == ["generate", "generate/vllm:small-1b", "generate/extractive"]
        assert [r.model for r in recs] == ["served-7b", "small-1b", "extractive"]
        assert [r.operation for r in recs] == ["chat", "text_completion", "chat"]

    def test_token_priced_attempts_pay_their_tokens_and_unknown_cache_stays_unknown(self, pipeline, book):
        st = make_stage(pipeline, resource="tiny-llm")
        a = Attempt("vllm:t", "tiny-llm", ok=True, start=0, end=1)
        a.set_usage({"prompt_tokens": 100, "completion_tokens": 10}, "server")
        b = Attempt("vllm:t", "tiny-llm", ok=True, start=0, end=1)
        b.set_usage({"prompt_tokens": 100, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 60}}, "server")
        (_, ra), (_, rb) = st.attempt_records(states(2), [[a], [b]])
        assert ra.cached_input_tokens is None and ra.input_tokens == 100
        assert rb.cached_input_tokens == 60 and rb.input_tokens == 40
        assert cost_of(ra, book) == pytest.approx((100 * 1.0 + 10 * 2.0) / 1e6)
        assert cost_of(rb, book) == pytest.approx((40 * 1.0 + 60 * 0.5 + 10 * 2.0) / 1e6)

    def test_tpot_follows_vllm_bench(self):
        a = Attempt("b", "r", start=0.0, end=2.0, ttft=0.5, output_tokens=4)
        assert a.tpot == pytest.approx((2.0 - 0.5) / 3)
        assert Attempt("b", "r", ttft=0.5, output_tokens=1).tpot is None


class Raises(Generator):
    """A backend with a bug: it raises instead of recording the failure."""

    async def generate(self, prompt, attempt, on_text):
        raise KeyError("choices")


class TestDispatch:
    def test_each_entry_of_the_chain_gets_its_registered_class(self, pipeline):
        from ragcost.generate.extractive import Extractive
        from ragcost.generate.vllm_server import VllmServer

        st = Generate(Generate.Params(backend="vllm", base_url="http://127.0.0.1:1/v1", model="m",
                                      fallback=[{"backend": "extractive"}]), pipeline)
        assert [type(g) for g in st.generators] == [VllmServer, Extractive]

    def test_a_backend_that_raises_is_a_failed_attempt_then_the_fallback(self, pipeline):
        generator_registry.register("raises-test")(Raises)
        try:
            st = make_stage(pipeline, backend="raises-test", retry={"attempts": 2}, fallback=[{"backend": "extractive"}])
            [s] = states()
            _, recs = run_stage(st, [s])
        finally:
            generator_registry.unregister("raises-test")
        [(_, bad), (_, good)] = recs  # not retried: a bug is not a transient fault
        assert bad.failures == 1 and "KeyError" in bad.notes["error"] and "raises-test" in bad.notes["error"]
        assert bad.wall_seconds >= 0 and bad.e2e_s >= 0  # timed by the stage
        assert good.failures == 0 and "30 days" in s.answer and s.error is None

    def test_every_backend_failing_fails_the_query_as_an_outcome(self, pipeline):
        generator_registry.register("raises-test")(Raises)
        try:
            st = make_stage(pipeline, backend="raises-test", retry={"attempts": 1})
            [s] = states()
            run_stage(st, [s])
        finally:
            generator_registry.unregister("raises-test")
        assert s.outcome == "failed" and s.outcome_stage == "generate" and "every backend failed" in s.error
