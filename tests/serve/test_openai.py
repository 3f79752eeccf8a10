"""OpenAI compatibility with the real clients: the `openai` package and LangChain's ChatOpenAI."""

from __future__ import annotations

import httpx
import pytest

from tests.serve.conftest import ServerThread, ledger_rows

openai = pytest.importorskip("openai")

Q = [{"role": "user", "content": "how do I get a refund?"}]


@pytest.fixture(scope="module")
def server(kb_served):
    with ServerThread(kb_served) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="key-acme", max_retries=0)


def _streamed(client, **kw) -> tuple[str, list]:
    pieces, finishes = [], []
    for ev in client.chat.completions.create(model="kb", messages=Q, stream=True, **kw):
        if ev.choices:
            pieces.append(ev.choices[0].delta.content or "")
            if ev.choices[0].finish_reason:
                finishes.append(ev.choices[0].finish_reason)
    return "".join(pieces), finishes


class TestOpenAIClient:
    def test_plain_and_streamed_give_the_same_answer(self, client):
        plain = client.chat.completions.create(model="kb", messages=Q)
        text, finishes = _streamed(client)
        assert plain.choices[0].finish_reason == "stop" and finishes == ["stop"]
        assert "refund" in text.lower() and text == plain.choices[0].message.content

    def test_stop_cuts_the_answer_before_the_stop_sequence_streamed_or_not(self, client):
        full = client.chat.completions.create(model="kb", messages=Q).choices[0].message.content
        stop = full.split()[3]  # a word inside the answer
        cut = full[: full.index(stop)]
        plain = client.chat.completions.create(model="kb", messages=Q, stop=[stop])
        text, finishes = _streamed(client, stop=stop)
        assert plain.choices[0].message.content == cut == text and stop not in text
        assert plain.choices[0].finish_reason == "stop" and finishes == ["stop"]

    def test_max_tokens_limits_the_answer_and_says_length(self, client):
        r = client.chat.completions.create(model="kb", messages=Q, max_tokens=5)
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "length" and 0 < len(text) <= 5 * 4  # 4 characters a token, the counter's rule
        assert r.usage.completion_tokens <= 5
        streamed, finishes = _streamed(client, max_completion_tokens=5)
        assert streamed == text and finishes == ["length"]

    def test_sampling_fields_are_accepted_by_a_deterministic_generator(self, client):
        base = client.chat.completions.create(model="kb", messages=Q).choices[0].message.content
        r = client.chat.completions.create(model="kb", messages=Q, temperature=1.3, top_p=0.5, seed=7, n=1,
                                           presence_penalty=0, response_format={"type": "text"}, user="alice",
                                           metadata={"team": "support"}, store=False, parallel_tool_calls=False,
                                           tool_choice="none", logprobs=False)
        assert r.choices[0].message.content == base

    @pytest.mark.parametrize("kw,param", [
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"frequency_penalty": -1.0}, "frequency_penalty"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"reasoning_effort": "high"}, "reasoning_effort"),
        ({"modalities": ["text", "audio"]}, "modalities"),
    ])
    def test_a_field_the_pipeline_cannot_honour_is_a_400_naming_it(self, client, kw, param):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="kb", messages=Q, **kw)
        err = e.value.body
        assert e.value.status_code == 400 and err["param"] == param and err["code"] == "unsupported_parameter"
        assert err["type"] == "invalid_request_error" and param in err["message"]

    def test_an_unknown_field_is_a_400_naming_it(self, client):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="kb", messages=Q, extra_body={"temprature": 0})
        assert e.value.body["param"] == "temprature"

    def test_a_conversation_with_a_tool_calling_assistant_turn_is_accepted(self, client):
        msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                                        "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "{}"},
                {"role": "user", "content": [{"type": "text", "text": "how do I reset my password?"}]}]
        r = client.chat.completions.create(model="kb", messages=msgs)
        assert "password" in r.choices[0].message.content.lower()

    def test_an_image_part_is_refused_by_name(self, client):
        msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]
        with pytest.raises(openai.BadRequestError, match="image_url"):
            client.chat.completions.create(model="kb", messages=msgs)

    def test_models_lists_the_pipeline_and_an_unknown_model_is_a_404(self, client):
        assert [m.id for m in client.models.list().data] == ["kb"]
        assert client.models.retrieve("kb").owned_by == "ragcost"
        with pytest.raises(openai.NotFoundError) as e:
            client.chat.completions.create(model="gpt-4o", messages=Q)
        assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"

    def test_a_wrong_key_is_an_authentication_error(self, server):
        bad = openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.chat.completions.create(model="kb", messages=Q)

    def test_user_labels_the_query_in_the_ledger(self, client, kb_served):
        r = client.chat.completions.create(model="kb", messages=Q, user="alice@example")
        qid = r.model_extra["ragcost"]["id"]
        q = next(q for q in ledger_rows(kb_served)[0] if q["query_id"] == qid)
        assert q["user_label"] == "alice@example" and q["tenant"] == "acme"


class TestErrorEnvelope:
    @pytest.mark.parametrize("method,path,status", [("GET", "/v2/nothing", 404), ("GET", "/v1/query", 405),
                                                    ("DELETE", "/v1/chat/completions", 405)])
    def test_every_error_is_openais_error_object(self, server, method, path, status):
        r = httpx.request(method, server.url + path, headers={"authorization": "Bearer key-acme"})
        assert r.status_code == status and set(r.json()["error"]) == {"message", "type", "param", "code"}


class TestLangChain:
    @pytest.fixture
    def chat(self, server):
        lc = pytest.importorskip("langchain_openai")
        return lambda **kw: lc.ChatOpenAI(base_url=server.url + "/v1", api_key="key-acme", model="kb", max_retries=0, **kw)

    def test_invoke_stream_and_stop(self, chat, client):
        full = client.chat.completions.create(model="kb", messages=Q).choices[0].message.content
        assert chat().invoke("how do I get a refund?").content == full
        assert "".join(c.content for c in chat().stream("how do I get a refund?")) == full
        stop = full.split()[3]
        assert chat(stop=[stop]).invoke("how do I get a refund?").content == full[: full.index(stop)]
        assert chat(temperature=0.2).invoke("how do I get a refund?", stop=[stop]).content == full[: full.index(stop)]

    def test_an_unsupported_parameter_raises(self, chat):
        import openai as o

        with pytest.raises(o.BadRequestError, match="logprobs"):
            chat(logprobs=True).invoke("refund")
