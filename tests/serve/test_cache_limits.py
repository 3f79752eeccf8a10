"""The answer cache and a request's generation limits, through a real `ragcost serve` and the `openai` client.

A request's max_tokens / stop / sampling fields are part of the cache scope, and an answer they may have cut
(finish_reason "length", or a request that sent stop sequences) is never written: one `max_tokens: 1` request
cannot poison the tenant's cache, and a cached whole answer never ignores a later request's limits."""

from __future__ import annotations

import signal

import pytest

from tests.cache.conftest import CACHED
from tests.serve.conftest import variant
from tests.serve.test_signals import Served

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.slow

Q = [{"role": "user", "content": "how do I get a refund?"}]


@pytest.fixture(scope="module")
def served(kb_served):
    s = Served(variant(kb_served, "cached.yaml", stages=CACHED))
    yield s
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(60) == 0


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served.url + "/v1", api_key="key-acme", max_retries=0)


def test_a_cut_answer_is_not_cached_and_a_cached_answer_keeps_each_requests_limits(client):
    cut = client.chat.completions.create(model="kb", messages=Q, max_tokens=1)
    assert cut.choices[0].finish_reason == "length"
    short = cut.choices[0].message.content
    # the cut answer was not written: a plain request gets the whole answer, not the one-token one
    whole = client.chat.completions.create(model="kb", messages=Q)
    full = whole.choices[0].message.content
    assert whole.choices[0].finish_reason == "stop" and len(full) > len(short) + 10 and full.startswith(short.strip())
    # the whole answer is cached now (a repeat is answered the same) ...
    again = client.chat.completions.create(model="kb", messages=Q)
    assert again.choices[0].message.content == full
    # ... and a request with its own limits still gets them, not the cached whole answer
    for _ in range(2):
        cut2 = client.chat.completions.create(model="kb", messages=Q, max_tokens=1)
        assert cut2.choices[0].finish_reason == "length" and cut2.choices[0].message.content == short
    stop = full.split()[3]
    stopped = client.chat.completions.create(model="kb", messages=Q, stop=[stop])
    assert stopped.choices[0].message.content == full[: full.index(stop)]
    # and none of the cut answers reached the plain requests
    assert client.chat.completions.create(model="kb", messages=Q).choices[0].message.content == full


def test_a_cached_answer_is_a_hit_for_the_same_limits_only(served):
    import httpx

    def ask(**extra):
        r = httpx.post(served.url + "/v1/chat/completions", headers={"Authorization": "Bearer key-acme"},
                       json={"model": "kb", "messages": [{"role": "user", "content": "can I export my data as CSV?"}],
                             **extra}, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()

    first = ask(max_tokens=200)
    assert first["choices"][0]["finish_reason"] == "stop"  # whole within 200 tokens: cacheable under these limits
    hit = ask(max_tokens=200)
    assert hit["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    assert _tier(hit) == "exact"
    other = ask(max_tokens=3)  # other limits: not that entry
    assert _tier(other) == "miss" and other["choices"][0]["finish_reason"] == "length"
    assert _tier(ask(temperature=0.5)) == "miss"  # a sampling field is part of the scope too


def _tier(body: dict):
    c = (body.get("ragcost") or {}).get("cache")
    return c.get("tier") if isinstance(c, dict) else None
