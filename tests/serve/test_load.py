"""Under load: shared embed calls, a bounded queue (429), and a client that leaves mid-stream."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.serve.conftest import ServerThread, ledger_rows, variant

ACME = {"authorization": "Bearer key-acme"}


async def _fire(url: str, n: int, path: str = "/v1/query") -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        return await asyncio.gather(*(c.post(path, headers=ACME, json={"text": f"refund question {i}"}) for i in range(n)))


class TestMicroBatching:
    @pytest.mark.slow
    def test_200_concurrent_requests_all_succeed_and_share_embed_calls(self, kb_served):
        # admission: queue: a cold server with admission by deadline admits one batch's worth before it has a rate
        with ServerThread(variant(kb_served, "burst.yaml", serve={"batch_window_ms": 20, "max_batch": 64, "admission": "queue",
                                                                  "keys": "file:keys.json"})) as s:
            rs = asyncio.run(_fire(s.url, 200))
        assert [r.status_code for r in rs] == [200] * 200
        ids = {r.json()["id"] for r in rs}
        qrows, srows = ledger_rows(kb_served)
        assert ids <= {q["query_id"] for q in qrows}
        embed_calls = {r["call_id"] for r in srows if r["query_id"] in ids and r["stage"] == "embed"}
        assert len(embed_calls) < 200
        # The shared call's cost is split: the shares of each call add up to the call's cost once.
        shares = [r for r in srows if r["query_id"] in ids and r["stage"] == "embed"]
        for cid in embed_calls:  # split by each query's tokens (issue 24): one row a query, the shares add to 1
            mine = [r for r in shares if r["call_id"] == cid]
            assert all(r["items"] == 1 for r in mine) and sum(r["busy_share"] for r in mine) == pytest.approx(1, abs=1e-12)
        assert max(r["shared_by"] for r in shares) > 1


class TestBackpressure:
    def test_a_full_queue_answers_429_with_retry_after(self, kb_served):
        tight = variant(kb_served, "tight.yaml", serve={"batch_window_ms": 0, "max_queue": 2, "admission": "queue", "keys": "file:keys.json"},
                        stages=[{"type": "retrieve", "k": 3}, {"type": "generate", "backend": "slow-words"}])
        with ServerThread(tight) as s:
            rs = asyncio.run(_fire(s.url, 12))
        codes = [r.status_code for r in rs]
        assert 429 in codes and 200 in codes, codes
        refused = next(r for r in rs if r.status_code == 429)
        assert int(refused.headers["retry-after"]) >= 1
        assert "serve.max_queue" in refused.json()["error"]["message"]


def _row_with_error(pipeline, error: str, n: int = 1):
    end = time.monotonic() + 20
    while time.monotonic() < end:
        qrows, srows = ledger_rows(pipeline)
        found = [q for q in qrows if q["error"] == error]
        if len(found) >= n:
            return found, srows
        time.sleep(0.2)
    raise AssertionError(f"no ledger row with error {error!r}")


@pytest.fixture(scope="module")
def slow(kb_served):
    """A server whose generation streams a word every 50 ms, with a 1 s deadline."""
    p = variant(kb_served, "slow.yaml", stages=[{"type": "retrieve", "k": 3}, {"type": "generate", "backend": "slow-words"}],
                serve={"batch_window_ms": 5, "deadline_s": 1, "admission": "queue", "keys": "file:keys.json"})
    with ServerThread(p) as s:
        yield s, p


class TestDisconnect:
    def test_a_client_leaving_mid_stream_leaves_a_ledger_row_with_its_cost_and_the_error(self, slow):
        s, pipeline = slow
        body = {"model": "kb", "stream": True, "messages": [{"role": "user", "content": "refund within 30 days"}]}
        with httpx.Client(base_url=s.url, timeout=30) as c:
            with c.stream("POST", "/v1/chat/completions", headers=ACME, json=body) as r:
                seen = 0
                for line in r.iter_lines():
                    if '"content": "' in line and '"content": ""' not in line:
                        seen += 1
                    if seen >= 2:
                        break  # leave mid-answer: closing the response drops the connection
        gone, srows = _row_with_error(pipeline, "client disconnected")
        q = gone[0]
        assert not q["ok"] and q["tenant"] == "acme" and q["outcome"] == "failed"
        mine = [r for r in srows if r["query_id"] == q["query_id"]]
        assert {"embed", "retrieve", "generate"} <= {r["stage"] for r in mine}
        assert q["cost_usd"] > 0 and q["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in mine))

    def test_a_plain_request_whose_client_gives_up_is_recorded_as_disconnected(self, slow):
        s, pipeline = slow
        before = len([q for q in ledger_rows(pipeline)[0] if q["error"] == "client disconnected"])
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(s.url + "/v1/query", headers=ACME, json={"text": "refund within 30 days"}, timeout=0.4)
        gone, _ = _row_with_error(pipeline, "client disconnected", before + 1)
        assert len(gone) == before + 1

    def test_past_the_deadline_the_client_gets_504_and_the_ledger_says_so(self, slow):
        s, pipeline = slow
        r = httpx.post(s.url + "/v1/query", headers=ACME, json={"text": "refund within 30 days " * 20, "k": 3}, timeout=30)
        assert r.status_code == 504 and "deadline_s" in r.json()["error"]["message"]
        late, _ = _row_with_error(pipeline, "deadline exceeded")
        assert late[0]["cost_usd"] > 0


class TestAdmissionByDeadline:
    def test_past_the_measured_capacity_requests_are_refused_at_once_and_none_is_computed_late(self, kb_served):
        deadline = 2.5  # a one-sentence answer streams in about 0.8 s (a word every 50 ms)
        p = variant(kb_served, "admission.yaml", stages=[{"type": "retrieve", "k": 3},
                                                         {"type": "generate", "backend": "slow-words", "sentences": 1}],
                    serve={"batch_window_ms": 0, "deadline_s": deadline, "keys": "file:keys.json"})

        async def burst(url: str, n: int):
            async with httpx.AsyncClient(base_url=url, timeout=60) as c:
                async def one(i):
                    t0 = time.monotonic()
                    r = await c.post("/v1/query", headers=ACME, json={"text": f"refund question {i}"})
                    return r, time.monotonic() - t0
                return await asyncio.gather(*(one(i) for i in range(n)))

        with ServerThread(p) as s:
            assert httpx.post(s.url + "/v1/query", headers=ACME, json={"text": "refund"}, timeout=60).status_code == 200  # a measured rate
            out = asyncio.run(burst(s.url, 12))
            run_id = s.service.session.run_id
        codes = [r.status_code for r, _ in out]
        assert 200 in codes and 429 in codes, codes
        for r, took in out:
            if r.status_code == 429:
                assert took < 1.0 and int(r.headers["retry-after"]) >= 1 and "deadline_s" in r.json()["error"]["message"]
            if r.status_code == 200:
                assert took <= deadline + 0.5
        qrows, _ = ledger_rows(p)
        late = [q for q in qrows if q["run_id"] == run_id and q["error"] == "deadline exceeded"]
        assert all(q["cost_usd"] == 0 for q in late), late  # cancelled before it ran, never charged
