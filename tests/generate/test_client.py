"""The OpenAI-compatible backends (vllm, openai) keep the generator contract against a real local HTTP server."""

from __future__ import annotations

import pytest

from ragcost.generate import BackendParams
from ragcost.testing.generator import GeneratorContract, generate_batch
from tests.generate.fault_server import FaultServer, closed_port

NO_RETRY = {"attempts": 1, "initial_s": 0, "max_s": 0, "jitter_s": 0}


def http_params(backend: str, base_url: str, **kw) -> BackendParams:
    return BackendParams(backend=backend, base_url=base_url, model="fake", max_tokens=5, retry=NO_RETRY,
                         timeout_s=2.0, read_timeout_s=1.0, **kw)


@pytest.fixture
def server():
    with FaultServer() as srv:
        yield srv


class TestVllmServer(GeneratorContract):
    invalid = [({"backend": "vllm"}, "needs model"), ({"backend": "vllm", "model": "m"}, "needs base_url")]

    @pytest.fixture
    def params(self, server) -> BackendParams:
        return http_params("vllm", server.base_url)

    @pytest.fixture
    def failing_params(self) -> BackendParams:
        return http_params("vllm", f"http://127.0.0.1:{closed_port()}/v1")

    def test_asks_for_usage_in_every_chunk_and_labels_itself_with_the_model(self, generator, prompt, server):
        generate_batch(generator, [prompt])
        assert server.requests[0]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        assert generator.params.backend_name == "vllm:fake"

    def test_a_refused_connection_may_be_retried(self, failing_params, prompt):
        from ragcost.generate.vllm_server import VllmServer

        [(att, _)] = generate_batch(VllmServer(failing_params), [prompt])
        assert att.retryable and "ConnectError" in att.error and att.usage_source == "none"


class TestOpenAIApi(GeneratorContract):
    invalid = [({"backend": "openai", "model": "gpt-4o-mini"}, "api_key_env"), ({"backend": "openai"}, "needs model")]

    @pytest.fixture
    def params(self, server, monkeypatch) -> BackendParams:
        monkeypatch.setenv("RAGCOST_CONTRACT_KEY", "sk-test")
        return http_params("openai", server.base_url, api_key_env="RAGCOST_CONTRACT_KEY")

    @pytest.fixture
    def failing_params(self, monkeypatch) -> BackendParams:
        monkeypatch.setenv("RAGCOST_CONTRACT_KEY", "sk-test")
        return http_params("openai", f"http://127.0.0.1:{closed_port()}/v1", api_key_env="RAGCOST_CONTRACT_KEY")

    def test_sends_the_key_and_asks_only_for_final_usage(self, generator, prompt, server):
        [(att, _)] = generate_batch(generator, [prompt])
        assert server.headers[0]["authorization"] == "Bearer sk-test"
        assert server.requests[0]["stream_options"] == {"include_usage": True}
        assert (att.prompt_tokens, att.output_tokens, att.usage_source) == (11, 5, "server")

    def test_without_base_url_it_talks_to_openai(self):
        from ragcost.generate.openai_api import OpenAIApi

        p = BackendParams(backend="openai", model="gpt-4o-mini", api_key_env="K")
        assert OpenAIApi(p).url == "https://api.openai.com/v1/chat/completions"
        assert OpenAIApi(p.model_copy(update={"api": "completions"})).url == "https://api.openai.com/v1/completions"

    def test_a_missing_key_fails_at_warm_up_naming_the_variable(self, monkeypatch):
        from ragcost.generate.openai_api import OpenAIApi

        monkeypatch.delenv("RAGCOST_CONTRACT_KEY", raising=False)
        with pytest.raises(Exception, match="RAGCOST_CONTRACT_KEY"):
            OpenAIApi(http_params("openai", "http://127.0.0.1:1/v1", api_key_env="RAGCOST_CONTRACT_KEY")).warm_up()
