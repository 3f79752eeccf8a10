"""Retries, backoff and fallback against real sockets on 127.0.0.1: 503s, cut streams, bad JSON, a closed port."""

from __future__ import annotations

import pytest

from ragcost.cost.compute import cost_of
from ragcost.generate.prompt import approx_tokens
from tests.generate.fault_server import FaultServer, closed_port
from tests.generate.helpers import make_stage, run_stage, states

FAST_RETRY = {"attempts": 3, "initial_s": 0.01, "max_s": 0.05, "jitter_s": 0.01}


def vllm(base_url: str, **kw) -> dict:
    return {"backend": "vllm", "base_url": base_url, "model": "fake", "resource": "tiny-llm", "retry": FAST_RETRY,
            "timeout_s": 2.0, "read_timeout_s": 1.0, "max_tokens": 5, **kw}


class TestStreaming:
    def test_a_clean_stream_arrives_in_order_with_server_usage(self, pipeline, book):
        with FaultServer(cached=4) as srv:
            st = make_stage(pipeline, **vllm(srv.base_url))
            pieces = []
            st.on_event = lambda s, kind, text: pieces.append(text) if kind == "text" else None
            [s] = states()
            _, [(_, rec)] = run_stage(st, [s])
        assert "".join(pieces) == s.answer == "alpha beta gamma delta [1]"
        assert s.citations == ["kb-1"]
        assert (rec.input_tokens, rec.cached_input_tokens, rec.output_tokens) == (7, 4, 5)
        assert cost_of(rec, book) == pytest.approx((7 * 1.0 + 4 * 0.5 + 5 * 2.0) / 1e6)
        assert 0 < rec.ttft_s < rec.e2e_s
        body = srv.requests[0]
        assert body["stream"] and body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        assert body["messages"][0]["role"] == "system" and "[1] Refund policy" in body["messages"][1]["content"]

    def test_completions_api_and_no_cached_count_means_unknown(self, pipeline):
        with FaultServer() as srv:
            st = make_stage(pipeline, **vllm(srv.base_url, api="completions"))
            [s] = states()
            _, [(_, rec)] = run_stage(st, [s])
        assert "prompt" in srv.requests[0] and s.answer.startswith("alpha")
        assert rec.cached_input_tokens is None and rec.input_tokens == 11

    def test_non_streaming_takes_usage_from_the_body(self, pipeline):
        with FaultServer() as srv:  # answers a stream anyway: the client must notice it is not JSON
            st = make_stage(pipeline, **vllm(srv.base_url, stream=False), fallback=[{"backend": "extractive"}])
            [s] = states()
            _, recs = run_stage(st, [s])
        assert recs[0][1].failures == 1 and "not JSON" in recs[0][1].notes["error"]
        assert s.generation["backend"] == "extractive"


class TestRetries:
    @pytest.mark.parametrize("fault", ["503", "429", "cut", "garbage"])
    def test_a_retryable_fault_is_retried_and_every_attempt_recorded(self, pipeline, book, fault):
        with FaultServer([fault]) as srv:
            st = make_stage(pipeline, **vllm(srv.base_url))
            events = []
            st.on_event = lambda s, kind, text: events.append(kind)
            [s] = states()
            rec, recs = run_stage(st, [s])
        assert s.error is None and s.answer.endswith("[1]")
        failed, ok = recs[0][1], recs[1][1]
        assert (failed.failures, failed.retries, ok.failures, ok.retries) == (1, 0, 0, 1)
        assert "retry" in events
        assert rec.retries == 1 and rec.failures == 1
        if fault == "cut":  # two chunks arrived before the cut: the prompt and what arrived are billed
            assert failed.output_tokens == approx_tokens("alpha beta") and failed.tokens_estimated
            assert failed.input_tokens > 0 and cost_of(failed, book) > 0

    def test_a_client_error_is_not_retried_but_falls_back(self, pipeline):
        with FaultServer(["400"]) as srv:
            st = make_stage(pipeline, **vllm(srv.base_url), fallback=[{"backend": "extractive"}])
            [s] = states()
            _, recs = run_stage(st, [s])
        assert len(srv.requests) == 1 and recs[0][1].notes["status"] == 400
        assert recs[1][1].stage == "generate/extractive" and "30 days" in s.answer

    def test_a_timeout_is_retried(self, pipeline):
        with FaultServer(["slow"]) as srv:
            st = make_stage(pipeline, **vllm(srv.base_url, timeout_s=0.5))
            [s] = states()
            _, recs = run_stage(st, [s])
        assert "timeout" in recs[0][1].notes["error"] and s.error is None


class TestFallback:
    def test_a_closed_port_exhausts_retries_then_the_chain_goes_large_small_extractive(self, pipeline, book):
        dead = f"http://127.0.0.1:{closed_port()}/v1"
        with FaultServer(["503", "503", "503"]) as small:
            st = make_stage(pipeline, **vllm(dead, label="large"),
                            fallback=[vllm(small.base_url, label="small", resource="small-llm"), {"backend": "extractive"}])
            [s] = states()
            _, recs = run_stage(st, [s])
        stages = [r.stage for _, r in recs]
        assert stages == ["generate"] * 3 + ["generate/small"] * 3 + ["generate/extractive"]
        assert all(r.failures == 1 for _, r in recs[:6]) and recs[6][1].failures == 0
        assert "ConnectError" in recs[0][1].notes["error"]
        assert s.generation["attempts"] == 7 and s.generation["backend"] == "extractive"
        assert [r.resource for _, r in recs] == ["tiny-llm"] * 3 + ["small-llm"] * 3 + ["cpu"]

    def test_when_every_backend_fails_the_query_fails_as_data(self, pipeline):
        dead = f"http://127.0.0.1:{closed_port()}/v1"
        st = make_stage(pipeline, **vllm(dead, retry={"attempts": 2, "initial_s": 0, "max_s": 0, "jitter_s": 0}))
        batch = states(2)
        _, recs = run_stage(st, batch)
        assert all(s.error and "every backend failed" in s.error for s in batch)
        assert len(recs) == 4 and all(r.failures == 1 for _, r in recs)


class TestConcurrency:
    def test_a_batch_is_sent_concurrently_up_to_the_limit(self, pipeline):
        with FaultServer() as srv:
            st = make_stage(pipeline, **vllm(srv.base_url), concurrency=4)
            batch = states(8)
            _, recs = run_stage(st, batch)
        assert len(srv.requests) == 8 and all(s.error is None for s in batch)
        periods: dict[str, list] = {}
        for _, r in recs:
            periods.setdefault(r.call_id, []).append(r)
        busy = sum(rs[0].wall_seconds for rs in periods.values())
        assert busy < sum(r.e2e_s for _, r in recs)  # streams overlapped: busy time is shorter than their sum
        assert sum(len(rs) for rs in periods.values()) == 8 and all(rs[0].shared_by == len(rs) for rs in periods.values())
