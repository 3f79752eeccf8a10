"""Generation accounting against real sockets on 127.0.0.1: missing usage, cut streams, busy periods per endpoint, shares by duration, the stage's remainder."""

from __future__ import annotations

import pytest

from ragcost.cost.compute import busy_period_cost, cost_of
from ragcost.generate.accounting import fill_missing_usage, shares
from ragcost.generate.attempt import Attempt
from ragcost.generate.prompt import approx_tokens, build_prompt
from ragcost.generate.params import BackendParams
from tests.generate.fault_server import FaultServer
from tests.generate.helpers import HITS, make_stage, overheads, run_stage, states

ANSWER = "alpha beta gamma delta [1]"
NO_RETRY_WAIT = {"attempts": 2, "initial_s": 0.0, "max_s": 0.0, "jitter_s": 0.0}


def vllm(base_url: str, **kw) -> dict:
    return {"backend": "vllm", "base_url": base_url, "model": "fake", "resource": "tiny-llm", "retry": NO_RETRY_WAIT,
            "timeout_s": 2.0, "read_timeout_s": 1.0, "max_tokens": 5, **kw}


def sent_prompt(question: str, **params) -> str:
    return build_prompt(question, HITS, BackendParams(**params)).text()


def word_tokenizer(folder) -> str:
    """A local tokenizer.json that splits on whitespace and punctuation (one token a word)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    return str(folder)


def by_period(recs) -> dict[str, list]:
    out: dict[str, list] = {}
    for _, r in recs:
        out.setdefault(r.call_id, []).append(r)
    return out


class TestMissingUsage:
    def test_a_stream_without_usage_bills_the_estimated_prompt_and_answer(self, pipeline, book):
        with FaultServer(["nousage"]) as srv:
            st = make_stage(pipeline, **vllm(srv.base_url))
            [s] = states()
            call, [(_, rec)] = run_stage(st, [s])
        assert s.answer == ANSWER and rec.failures == 0 and call.tokens_estimated
        assert rec.input_tokens == approx_tokens(sent_prompt(s.text)) and rec.output_tokens == approx_tokens(ANSWER)
        assert rec.tokens_estimated and rec.notes["usage"] == "estimated" and s.generation["tokens_estimated"]
        assert cost_of(rec, book) == pytest.approx((rec.input_tokens * 1.0 + rec.output_tokens * 2.0) / 1e6)

    def test_a_local_tokenizer_counts_what_the_server_did_not(self, pipeline, tmp_path):
        from tokenizers import Tokenizer

        folder = word_tokenizer(tmp_path)
        tok = Tokenizer.from_file(f"{folder}/tokenizer.json")
        count = lambda text: len(tok.encode(text, add_special_tokens=False).ids)  # noqa: E731
        with FaultServer(["nousage"]) as srv:
            st = make_stage(pipeline, **vllm(srv.base_url, tokenizer=folder))
            [s] = states()
            _, [(_, rec)] = run_stage(st, [s])
        assert rec.input_tokens == count(sent_prompt(s.text, tokenizer=folder)) and rec.output_tokens == count(ANSWER) == 7
        assert rec.tokens_estimated and rec.notes["usage"] == "counted"

    def test_server_usage_is_not_marked_estimated(self, pipeline):
        with FaultServer() as srv:
            st = make_stage(pipeline, **vllm(srv.base_url))
            _, [(_, rec)] = run_stage(st, states())
        assert (rec.input_tokens, rec.output_tokens, rec.tokens_estimated) == (11, 5, False)

    def test_a_cut_stream_bills_the_prompt_and_the_output_received(self, pipeline, book):
        with FaultServer(["cut"]) as srv:
            st = make_stage(pipeline, **vllm(srv.base_url, continuous_usage=False))
            [s] = states()
            _, [(_, cut), (_, ok)] = run_stage(st, [s])
        assert cut.failures == 1 and cut.tokens_estimated and cut.notes["chunks"] == 2
        assert cut.input_tokens == approx_tokens(sent_prompt(s.text)) and cut.output_tokens == approx_tokens("alpha beta")
        assert cost_of(cut, book) == pytest.approx((cut.input_tokens * 1.0 + cut.output_tokens * 2.0) / 1e6)
        assert not ok.tokens_estimated and ok.input_tokens == 11

    def test_an_http_error_bills_no_tokens(self, pipeline, book):
        with FaultServer(["503"]) as srv:
            st = make_stage(pipeline, **vllm(srv.base_url))
            _, [(_, failed), _] = run_stage(st, states())
        assert (failed.input_tokens, failed.output_tokens, failed.tokens_estimated) == (None, None, False)
        assert cost_of(failed, book) == 0

    def test_output_is_never_fewer_than_the_content_chunks_received(self):
        att = Attempt("b", "r", ok=True, text="ab", chunks=3)
        fill_missing_usage(att, build_prompt("q", HITS, BackendParams()), approx_tokens, exact=False)
        assert att.output_tokens == 3 and att.prompt_tokens > 0


class TestBusyPeriods:
    def test_two_endpoints_on_one_resource_get_two_busy_periods(self, pipeline, book):
        with FaultServer(["400"]) as a, FaultServer() as b:
            # q0's first request gets a 400 and falls back to b while q1 streams from a: both on "gpu".
            st = make_stage(pipeline, **vllm(a.base_url, resource="gpu", label="a"), concurrency=2,
                            fallback=[vllm(b.base_url, resource="gpu", label="b")])
            batch = states(2)
            _, recs = run_stage(st, batch)
        on_a = [r for _, r in recs if r.stage == "generate"]
        [on_b] = [r for _, r in recs if r.stage == "generate/b"]
        assert len(on_a) == 2 and on_b.notes["endpoint"] != on_a[0].notes["endpoint"]
        assert on_b.call_id not in {r.call_id for r in on_a}
        assert (on_b.busy_share, on_b.shared_by) == (1.0, 1) and on_b.wall_seconds == pytest.approx(on_b.e2e_s)

    def test_a_503_and_a_long_stream_share_a_period_by_their_durations(self, pipeline, book):
        # the stream takes 0.7 s: a 503 answered at once, even on a loaded box (one took 110 ms), is shorter
        with FaultServer(["503", "long"]) as srv:
            st = make_stage(pipeline, **vllm(srv.base_url, resource="gpu"), concurrency=2)
            _, recs = run_stage(st, states(2))
        [fast] = [r for _, r in recs if r.failures]
        period = by_period(recs)[fast.call_id]
        assert len(period) >= 2  # sent together: the 503 overlapped the other query's stream
        total = sum(r.e2e_s for r in period)
        for r in period:
            assert r.busy_share == pytest.approx(r.e2e_s / total) and r.shared_by == len(period)
            assert r.wall_seconds == period[0].wall_seconds
        assert sum(r.busy_share for r in period) == pytest.approx(1)
        assert fast.busy_share < min(r.busy_share for r in period if r is not fast)  # a quick 503 pays less than a stream
        # What the period costs, paid once: busy period cost × busy_share, summed over its attempts.
        assert sum(busy_period_cost(r, book) * r.busy_share for r in period) == pytest.approx(busy_period_cost(fast, book))

    def test_sequential_retries_are_separate_periods_each_paying_its_own_time(self, pipeline):
        with FaultServer(["503"]) as srv:
            st = make_stage(pipeline, **vllm(srv.base_url, resource="gpu",
                                             retry={**NO_RETRY_WAIT, "initial_s": 0.05, "max_s": 0.05}))
            _, [(_, failed), (_, ok)] = run_stage(st, states())
        assert failed.call_id != ok.call_id and failed.busy_share == ok.busy_share == 1.0
        assert failed.wall_seconds == pytest.approx(failed.e2e_s) and ok.wall_seconds == pytest.approx(ok.e2e_s)

    def test_zero_length_attempts_share_equally(self):
        assert shares([Attempt("b", "r", start=1.0, end=1.0), Attempt("b", "r", start=1.0, end=1.0)]) == [0.5, 0.5]


class TestStageRemainder:
    def test_time_outside_attempts_is_an_overhead_row_on_the_pipeline_resource(self, pipeline):
        backoff = {**NO_RETRY_WAIT, "initial_s": 0.15, "max_s": 0.15}
        with FaultServer(["503"]) as srv:
            st = make_stage(pipeline, **vllm(srv.base_url, retry=backoff), concurrency=2)
            batch = states(2)
            _, recs = run_stage(st, batch)
        over = overheads(batch)
        assert [r.stage for r in over] == ["generate/overhead"] * 2 and {r.resource for r in over} == {"cpu"}
        assert len({r.call_id for r in over}) == 1 and [r.busy_share for r in over] == [0.5, 0.5]
        assert all(r.shared_by == 2 and r.items == 1 for r in over)
        o = over[0]
        assert o.wall_seconds >= 0.1  # the backoff before the retry: no attempt was in flight
        assert o.wall_seconds + o.notes["attempts_busy_s"] == pytest.approx(o.notes["stage_wall_s"])
        assert sum(r.e2e_s for _, r in recs) >= o.notes["attempts_busy_s"] > 0

    def test_an_extractive_stage_reports_its_remainder_too(self, pipeline):
        st = make_stage(pipeline)
        batch = states(3)
        _, recs = run_stage(st, batch)
        over = overheads(batch)
        assert len(recs) == 3 and len(over) == 3 and sum(r.busy_share for r in over) == pytest.approx(1)
        assert over[0].notes["stage_wall_s"] >= over[0].notes["attempts_busy_s"] > 0
