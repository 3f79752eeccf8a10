"""vllm-offline keeps the generator contract; without a GPU, a stand-in ``vllm`` module plays the engine."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import pytest

from ragcost.errors import DependencyError
from ragcost.generate import Attempt, BackendParams
from ragcost.generate.vllm_offline import VllmOffline, fill_from_output, load_llm
from tests.contracts.generator import GeneratorContract, generate_batch


def _request_output(text="an answer [1]", cached=7, metrics=True):
    comp = SimpleNamespace(text=text, token_ids=[5, 6, 7])
    m = SimpleNamespace(arrival_time=100.0, first_token_time=100.25) if metrics else None
    return SimpleNamespace(prompt_token_ids=list(range(20)), outputs=[comp], num_cached_tokens=cached, metrics=m)


class FakeLLM:
    """``vllm.LLM`` as the backend uses it: built with the model and engine args, ``generate`` over a list."""

    calls: list[int] = []  # prompts per LLM.generate call, across instances

    def __init__(self, model: str, fail: bool = False) -> None:
        self.model, self.fail = model, fail

    def generate(self, prompts: list[str], sampling) -> list:
        FakeLLM.calls.append(len(prompts))
        if self.fail:
            raise RuntimeError("CUDA out of memory")
        return [_request_output(f"from {self.model}: 30 days [1]") for _ in prompts]


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = ModuleType("vllm")
    mod.LLM, mod.SamplingParams = FakeLLM, lambda **kw: SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", mod)
    FakeLLM.calls = []
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
