"""vllm-offline keeps the generator contract; without a GPU, a stand-in ``vllm`` module plays the engine."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import pytest

from ragcost.errors import DependencyError
from ragcost.generate import Attempt, BackendParams
from ragcost.generate.vllm_offline import VllmOffline, engine_work, fill_from_output, load_llm
from ragcost.testing.generator import GeneratorContract, generate_batch
from tests.generate.helpers import book, book_path, make_stage, pipeline, run_stage, states  # noqa: F401


def _request_output(text="an answer [1]", cached=7, metrics=True, tokens=3, stats=None):
    comp = SimpleNamespace(text=text, token_ids=list(range(5, 5 + tokens)))
    m = SimpleNamespace(arrival_time=100.0, first_token_time=100.25) if metrics else None
    if stats is not None:  # vLLM's V1 RequestStateStats (0.32, LLM(disable_log_stats=False)): engine-core monotonic
        scheduled, last = stats
        m = SimpleNamespace(arrival_time=1.7e9, first_token_latency=0.04, queued_ts=scheduled, scheduled_ts=scheduled,
                            first_token_ts=scheduled + 0.03, last_token_ts=last, num_generation_tokens=tokens)
    return SimpleNamespace(prompt_token_ids=list(range(20)), outputs=[comp], num_cached_tokens=cached, metrics=m)


class FakeLLM:
    """``vllm.LLM`` as the backend uses it: built with the model and engine args, ``generate`` over a list.

    With stats on (as ragcost builds it), each request carries V1-style scheduled/last-token times: the
    n-th prompt of a call is scheduled at 10.0 and decodes ``lengths[n]`` tokens at 10 ms each."""

    calls: list[int] = []  # prompts per LLM.generate call, across instances
    lengths: list[int] = [3]  # output tokens of the n-th prompt of a call (cycled)
    built_with: dict = {}

    def __init__(self, model: str, fail: bool = False, disable_log_stats: bool = True, **kw) -> None:
        self.model, self.fail, self.stats = model, fail, not disable_log_stats
        FakeLLM.built_with = {"disable_log_stats": disable_log_stats, **kw}

    def generate(self, prompts: list[str], sampling) -> list:
        FakeLLM.calls.append(len(prompts))
        if self.fail:
            raise RuntimeError("CUDA out of memory")
        out = []
        for i, _ in enumerate(prompts):
            n = FakeLLM.lengths[i % len(FakeLLM.lengths)]
            out.append(_request_output(f"from {self.model}: 30 days [1]", tokens=n, metrics=False,
                                       stats=(10.0, 10.0 + 0.01 * n) if self.stats else None))
        return out


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = ModuleType("vllm")
    mod.LLM, mod.SamplingParams = FakeLLM, lambda **kw: SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", mod)
    FakeLLM.calls, FakeLLM.lengths = [], [3]
    return mod


class TestVllmOffline(GeneratorContract):
    invalid = [({"backend": "vllm-offline"}, "needs model")]

    @pytest.fixture
    def params(self, fake_vllm) -> BackendParams:
        return BackendParams(backend="vllm-offline", model="/models/tiny")

    @pytest.fixture
    def failing_params(self, fake_vllm) -> BackendParams:
        return BackendParams(backend="vllm-offline", model="/models/tiny", engine_args={"fail": True})

    def test_requests_that_arrive_together_are_one_engine_call(self, generator, prompt):
        results = generate_batch(generator, [prompt] * 4)
        assert FakeLLM.calls == [4] and all(a.ok for a, _ in results)
        assert len({(a.start, a.end) for a, _ in results}) == 1  # one span: the batch's

    def test_loads_the_engine_once_and_labels_itself_without_the_path(self, generator):
        llm = generator.llm
        generator.warm_up()
        assert generator.llm is llm and generator.params.backend_name == "vllm-offline"

    def test_collects_its_own_window_so_the_stage_does_not_align_it(self):
        assert VllmOffline.aligns_starts is False


class TestBatchSplit:
    """One LLM.generate serves the whole batch: every request starts and ends with it, so the batch's busy
    period is split by what each request used of the engine, not equally."""

    def test_engine_seconds_from_vllm_stats_split_the_call(self, fake_vllm, pipeline):
        FakeLLM.lengths = [1, 4, 16]
        st = make_stage(pipeline, backend="vllm-offline", model="/models/tiny", resource="gpu")
        assert FakeLLM.built_with["disable_log_stats"] is False  # ragcost turns the per-request stats on
        _, recs = run_stage(st, states(3))
        assert FakeLLM.calls == [3]
        recs = [r for _, r in recs]
        assert len({r.call_id for r in recs}) == 1 and {r.shared_by for r in recs} == {3}
        assert [r.notes["share_by"] for r in recs] == ["engine_s"] * 3
        assert [r.busy_share for r in recs] == pytest.approx([1 / 21, 4 / 21, 16 / 21])
        assert sum(r.busy_share for r in recs) == pytest.approx(1)
        assert len({r.e2e_s for r in recs}) == 1  # each waited for the whole call: latency stays true

    def test_with_stats_off_the_split_goes_by_decode_steps(self, fake_vllm, pipeline):
        FakeLLM.lengths = [1, 4, 16]
        st = make_stage(pipeline, backend="vllm-offline", model="/models/tiny", resource="gpu",
                        engine_args={"disable_log_stats": True})
        _, recs = run_stage(st, states(3))
        recs = [r for _, r in recs]
        assert [r.notes["share_by"] for r in recs] == ["decode_steps"] * 3
        assert [r.busy_share for r in recs] == pytest.approx([2 / 24, 5 / 24, 17 / 24])  # output tokens + 1 each

    def test_engine_work_needs_every_request_timed(self):
        timed = [_request_output(tokens=2, stats=(5.0, 5.5)), _request_output(tokens=8, stats=(5.0, 6.5))]
        assert engine_work(timed) == ([0.5, 1.5], "engine_s")
        assert engine_work([timed[0], _request_output(tokens=8, metrics=False)]) == ([3.0, 9.0], "decode_steps")

    def test_v1_stats_give_the_time_to_first_token(self):
        a = fill_from_output(Attempt("vllm-offline", "gpu"), _request_output(metrics=False, stats=(5.0, 5.5)))
        assert a.ttft == pytest.approx(0.04)


class TestRequestOutput:
    def test_accounting_from_a_request_output(self):
        a = fill_from_output(Attempt("vllm-offline", "gpu"), _request_output())
        assert (a.prompt_tokens, a.cached_tokens, a.output_tokens, a.uncached_input) == (20, 7, 3, 13)
        assert a.ttft == pytest.approx(0.25) and a.ok and a.text == "an answer [1]"

    def test_no_cache_count_and_no_metrics_stay_unknown(self):
        a = fill_from_output(Attempt("vllm-offline", "gpu"), _request_output(cached=None, metrics=False))
        assert a.cached_tokens is None and a.ttft is None

    def test_without_vllm_installed_the_error_says_how_to_get_it(self):
        try:
            import vllm  # noqa: F401
        except ImportError:
            with pytest.raises(DependencyError, match=r"ragcost\[vllm\]"):
                load_llm(BackendParams(backend="vllm-offline", model="/models/x"))
        else:  # pragma: no cover - a GPU machine
            pytest.skip("vllm is installed here")
