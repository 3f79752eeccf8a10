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

    def test_a_time_that_does_not_grow_with_the_batch_is_one_time_at_any_size(self):
        """Concurrent generation: a batch of 8 took what a batch of 1 did. Least squares with the slope kept at 0,
        not the proportional guess that would say 16 queries take 3.6 s."""
        m = ServiceModel()
        m.seed(1, 1.02)
        m.seed(8, 0.98)
        assert (m.fixed, m.per_query) == (pytest.approx(1.0), 0.0)
        assert m.batch_s(16) == pytest.approx(1.0) and m.margin() == MARGIN

    def test_a_fixed_part_below_zero_is_a_fit_through_the_origin(self):
        m = ServiceModel()
        for n, t in ((1, 0.01), (2, 0.05), (4, 0.2)):
            m.add(n, t)
        assert m.fixed == 0.0 and m.per_query == pytest.approx((0.01 + 0.1 + 0.8) / 21)

    def test_seeds_count_until_real_batches_replace_them(self):
        m = ServiceModel(real_needed=2)
        m.seed(1, 1.0)
        assert m.measured and m.batch_s(1) == pytest.approx(1.0)
        m.add(1, 0.1)
        assert m.batch_s(1) == pytest.approx(0.55)  # the seed and one real batch
        m.add(1, 0.1)
        assert m.batch_s(1) == pytest.approx(0.1)  # real batches only

    def test_the_margin_widens_while_the_window_holds_a_load_change(self):
        m = ServiceModel()
        m.add(10, 1.0)
        assert m.margin() == MARGIN
        for _ in range(16):
            m.add(10, 1.0)
        for _ in range(15):
            m.add(10, 2.0)  # the machine got busy: batches now take twice as long
        assert m.margin() == pytest.approx(2.0 / (47.0 / 320 * 10))  # the newest batches over the blended fit
        for _ in range(32):
            m.add(10, 2.0)  # the old load has left the window: the model caught up
        assert m.margin() == MARGIN

    def test_a_transient_misprediction_does_not_become_the_margin(self):
        """Two guard-blocked queries (15 ms) then generated answers (0.85 s): the model fitted to the first two
        once said 16 ms for the third, and that ratio (57x) as the margin refused requests on an idle server."""
        m = ServiceModel()
        for s in (0.015, 0.015, 0.85, 0.85, 0.85, 0.85):
            m.add(1, s)
        assert m.batch_s(1) == pytest.approx(3.43 / 6)
        assert m.margin() == pytest.approx(0.85 / (3.43 / 6))  # an answered query over the mixed mean
        b = Batcher(session=None, window_ms=5, max_batch=8, max_queue=100)
        b.model = m
        b.check(deadline_s=30.0)  # admitted: about 0.86 s of work, nothing ahead


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
