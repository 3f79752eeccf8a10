"""Admission by deadline: the batch-time model, a cold burst admitted by the warm-up's measurement,
and a refusal made before the body is read."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

from ragcost.serve.batcher import MARGIN, Batcher, QueueFull, ServiceModel
from tests.serve.conftest import ServerThread, variant

ACME = {"authorization": "Bearer key-acme"}


class TestServiceModel:
    def test_fits_a_fixed_and_a_per_query_part(self):
        m = ServiceModel()
        for n in (1, 8, 32, 64):
            m.add(n, 0.05 + 0.01 * n)
        assert m.fixed == pytest.approx(0.05) and m.per_query == pytest.approx(0.01)
        assert m.rate(64) == pytest.approx(64 / 0.69)

    def test_one_batch_size_is_proportional(self):
        m = ServiceModel()
        m.add(4, 0.2)
        m.add(4, 0.2)
        assert (m.fixed, m.per_query) == (0.0, pytest.approx(0.05))

    def test_seeds_count_until_real_batches_replace_them(self):
        m = ServiceModel(real_needed=2)
        m.seed(1, 1.0)
        assert m.measured and m.batch_s(1) == pytest.approx(1.0)
        m.add(1, 0.1)
        assert m.batch_s(1) == pytest.approx(0.55)  # the seed and one real batch
        m.add(1, 0.1)
        assert m.batch_s(1) == pytest.approx(0.1)  # real batches only

    def test_the_margin_follows_how_wrong_recent_predictions_were(self):
        m = ServiceModel()
        m.add(10, 1.0)
        assert m.margin() == MARGIN
        for _ in range(20):
            m.add(10, 2.0)  # batches now take twice what the model said before each
        assert m.margin() > MARGIN


class TestCheck:
    def test_a_request_that_cannot_finish_in_time_is_refused_with_the_drain_time(self):
        b = Batcher(session=None, window_ms=5, max_batch=8, max_queue=100)
        b.seed(1, 2.0)
        with pytest.raises(QueueFull) as e:
            b.check(deadline_s=1.0)
        assert e.value.reason == "deadline" and e.value.predicted_s == pytest.approx(2.005)
        b.check(deadline_s=10.0)  # admitted

    def test_unmeasured_admits_one_batch(self):
        b = Batcher(session=None, window_ms=5, max_batch=8, max_queue=100)
        b.check(deadline_s=1.0)  # nothing measured, nothing ahead: admitted
        b.running_n = 8
        with pytest.raises(QueueFull) as e:
            b.check(deadline_s=1.0)
        assert e.value.reason == "unmeasured"


async def _burst(url: str, n: int) -> list[int]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as c:
        rs = await asyncio.gather(*(c.post("/v1/query", headers=ACME, json={"text": f"refund question {i}"}) for i in range(n)))
    return [r.status_code for r in rs]


# A one-sentence answer streamed a word every 50 ms: a batch takes about a second, so a burst of 80
# has all arrived before the first batch ends.
SLOW = [{"type": "retrieve", "k": 3}, {"type": "generate", "backend": "slow-words", "sentences": 1}]


class TestColdBurst:
    def test_the_warm_up_measures_the_service_so_a_cold_burst_is_admitted(self, kb_served):
        p = variant(kb_served, "cold.yaml", serve={"batch_window_ms": 20, "max_batch": 16, "deadline_s": 30, "keys": "file:keys.json"},
                    stages=SLOW)
        with ServerThread(p) as s:
            assert s.service.batcher.model.measured  # seeded before /readyz said ready
            codes = asyncio.run(_burst(s.url, 80))
        assert codes == [200] * 80

    def test_without_a_warm_up_a_cold_server_admits_one_batch(self, kb_served):
        p = variant(kb_served, "cold0.yaml", serve={"batch_window_ms": 20, "max_batch": 16, "deadline_s": 30, "warmup_queries": 0,
                                                    "keys": "file:keys.json"}, stages=SLOW)
        with ServerThread(p) as s:
            assert not s.service.batcher.model.measured
            codes = asyncio.run(_burst(s.url, 80))
        assert 429 in codes and 200 in codes


def test_an_overloaded_request_is_refused_before_its_body_arrives(kb_served):
    """A client that sends its headers and then stalls on the body still gets its 429 at once (not a 408 later)."""
    p = variant(kb_served, "early.yaml", serve={"deadline_s": 1, "body_timeout_s": 5, "keys": "file:keys.json"})
    with ServerThread(p) as s:
        m = s.service.batcher.model
        m._seed, m._real = [(1, 60.0)], 0  # as if a query took a minute: nothing can finish within 1 s
        m._recent.clear()
        m._fit()
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as sock:
            t0 = time.monotonic()
            sock.sendall(b"POST /v1/query HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-acme\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            head = sock.recv(4096).decode("latin-1")
            took = time.monotonic() - t0
    assert head.startswith("HTTP/1.1 429") and "retry-after: " in head.lower(), head[:200]
    assert took < 2.0  # the body would have timed out only after 5 s
