"""Hostile or odd request bodies against a real `ragcost serve`: each refused at its cause, with
OpenAI's error object, never a traceback (issue 27, item 6)."""

from __future__ import annotations

import errno
import json
import logging

import httpx
import pytest

from tests.reliability.conftest import REPO
from tests.serve.conftest import KEYS, ServerThread, make_pipeline

ACME = {"authorization": "Bearer key-acme"}
CHAT = "/v1/chat/completions"


def _deep(levels: int) -> bytes:
    """A body nested ``levels`` deep inside the filter: 2 bytes a level, so 30,000 levels is 60 KB (under 64 KB)."""
    return b'{"text": "refund", "filter": {"tenant": ' + b"[" * levels + b"]" * levels + b"}}"


def _chat(**fields) -> dict:
    return {"model": "kb", "messages": [{"role": "user", "content": "how do I get a refund?"}], **fields}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerThread(make_pipeline(tmp_path_factory.mktemp("bodies"), keys=True)) as s:
        yield s


def _error(r: httpx.Response) -> dict:
    assert r.headers["content-type"].startswith("application/json"), r.text[:200]
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert "Traceback" not in r.text
    return body["error"]


# (name, path, raw body or JSON, expected status, expected param, words the message holds)
REFUSED = [
    ("deep nesting in /v1/query, under the size limit", "/v1/query", _deep(30_000), 400, "body", "nested deeper"),
    ("deep nesting in chat", CHAT, b'{"model": "kb", "messages": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", 400, "body", "nested deeper"),
    ("a blank query", "/v1/query", {"text": "   "}, 400, "text", "blank"),
    ("a query of tabs and newlines", "/v1/query", {"text": "\t\n \r"}, 400, "text", "blank"),
    ("a blank last user message", CHAT, _chat(messages=[{"role": "user", "content": " \n "}]), 400, "messages", "blank"),
    ("a blank text part", CHAT, _chat(messages=[{"role": "user", "content": [{"type": "text", "text": "  "}]}]), 400, "messages", "blank"),
    ("max_tokens 0", CHAT, _chat(max_tokens=0), 400, "max_tokens", "greater than or equal to 1"),
    ("max_tokens -5", CHAT, _chat(max_tokens=-5), 400, "max_tokens", "greater than or equal to 1"),
    ("max_completion_tokens 0", CHAT, _chat(max_completion_tokens=0), 400, "max_completion_tokens", "greater than or equal to 1"),
    ("not JSON", "/v1/query", b"{text: refund", 400, "body", "not valid JSON"),
    ("a JSON array", "/v1/query", b"[1, 2]", 400, "body", "JSON object"),
    # JSON's own types, as OpenAI takes them: nothing is coerced (issue 39, item 12)
    ("stream as a string", CHAT, _chat(stream="yes"), 400, "stream", "valid boolean"),
    ("stream as 1", CHAT, _chat(stream=1), 400, "stream", "valid boolean"),
    ("max_tokens as a string", CHAT, _chat(max_tokens="5"), 400, "max_tokens", "valid integer"),
    ("temperature as a string", CHAT, _chat(temperature="0.5"), 400, "temperature", "valid number"),
    ("n as true", CHAT, _chat(n=True), 400, "n", "valid integer"),
    ("seed as a string", CHAT, _chat(seed="7"), 400, "seed", "valid integer"),
    ("stream_options without stream", CHAT, _chat(stream_options={"include_usage": True}), 400, "stream_options",
     "only allowed with stream: true"),
    ("k as true in chat", CHAT, _chat(k=True), 400, "k", "valid integer"),
    ("k as true in /v1/query", "/v1/query", {"text": "refund", "k": True}, 400, "k", "valid integer"),
    # nothing to ask: it was run, billed and cached (NUL), or called a prompt injection (zero-width) (issue 39)
    ("a NUL-only query", "/v1/query", {"text": "\u0000\u0000"}, 400, "text", "holds only NUL (U+0000) x 2, nothing to ask"),
    ("a NUL-only chat message", CHAT, _chat(messages=[{"role": "user", "content": "\u0000"}]), 400, "messages",
     "messages.0.content: holds only NUL (U+0000), nothing to ask"),
    ("a zero-width-only chat message", CHAT, _chat(messages=[{"role": "user", "content": "\u200b\u200b\ufeff"}]), 400,
     "messages", "holds only ZERO WIDTH SPACE (U+200B) x 2, ZERO WIDTH NO-BREAK SPACE (U+FEFF), nothing to ask"),
]


@pytest.mark.parametrize("name,path,body,status,param,words", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_hostile_body_is_refused_at_its_cause(server, name, path, body, status, param, words):
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = httpx.post(server.url + path, headers={**ACME, "content-type": "application/json"}, timeout=30, **kw)
    assert r.status_code == status, (name, r.status_code, r.text[:300])
    err = _error(r)
    assert err["param"] == param and words in err["message"] and err["type"] == "invalid_request_error", err


# Without a key, every one of these is a 401: the body is read only after the key checks out.
UNAUTHENTICATED = [
    ("deep nesting", "/v1/query", {"content": _deep(30_000)}),
    ("an unknown field", "/v1/query", {"json": {"text": "refund", "kk": 3}}),
    ("a malformed field", CHAT, {"json": _chat(max_tokens=-5)}),
    ("not JSON", "/v1/query", {"content": b"{{{"}),
    ("a body over the limit", "/v1/query", {"content": json.dumps({"text": "x" * 70_000}).encode()}),
]


@pytest.mark.parametrize("name,path,kw", UNAUTHENTICATED, ids=[r[0] for r in UNAUTHENTICATED])
@pytest.mark.parametrize("auth", [{}, {"authorization": "Bearer wrong"}], ids=["no key", "wrong key"])
def test_the_key_is_checked_before_the_body(server, name, path, kw, auth):
    r = httpx.post(server.url + path, headers={**auth, "content-type": "application/json"}, timeout=30, **kw)
    assert r.status_code == 401, (name, r.status_code, r.text[:200])
    assert _error(r)["type"] == "authentication_error"


def _broken_record(exc: BaseException):
    def record(answer):
        raise exc
    return record


def _disk_full() -> BaseException:
    """What DuckDB's write raises through SQLAlchemy when the disk is full: the OS error inside the driver's."""
    import sqlalchemy as sa

    cause = OSError(errno.ENOSPC, "No space left on device")
    e = sa.exc.OperationalError("INSERT INTO queries ...", {}, Exception('IO Error: Could not write file "kb.duckdb.wal": '
                                                                         'No space left on device'))
    e.__cause__ = cause
    return e


# (name, what the ledger write raises, status, code)
BROKEN = [
    ("a full disk", _disk_full, 503, "storage_full"),
    ("a bare ENOSPC", lambda: OSError(errno.ENOSPC, "No space left on device"), 503, "storage_full"),
    ("an unexpected bug", lambda: RuntimeError("boom"), 500, "internal_error"),
]


@pytest.mark.parametrize("name,make,status,code", BROKEN, ids=[b[0] for b in BROKEN])
@pytest.mark.parametrize("path,body", [("/v1/query", {"text": "refund"}), (CHAT, _chat())], ids=["query", "chat"])
def test_a_failing_ledger_write_is_an_error_object_and_one_log_line(server, monkeypatch, caplog, name, make, status, code, path, body):
    monkeypatch.setattr(server.service.session, "record", _broken_record(make()))
    with caplog.at_level(logging.ERROR, logger="ragcost.serve"):
        r = httpx.post(server.url + path, headers=ACME, json=body, timeout=30)
    assert r.status_code == status, r.text[:300]
    assert _error(r)["code"] == code
    if status == 503:
        assert int(r.headers["retry-after"]) > 0
    mine = [rec for rec in caplog.records if rec.name == "ragcost.serve"]
    assert len(mine) == 1 and mine[0].exc_info is None and "\n" not in mine[0].getMessage(), [m.getMessage() for m in mine]


def test_a_failing_ledger_write_mid_stream_ends_the_stream_with_an_error_object(server, monkeypatch):
    monkeypatch.setattr(server.service.session, "record", _broken_record(_disk_full()))
    with httpx.stream("POST", server.url + CHAT, headers=ACME, json=_chat(stream=True), timeout=30) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert events[-1]["error"]["code"] == "storage_full"


DUPLICATES = [
    ("a key twice", '{"k1": {"tenant": "acme"}, "k1": {"tenant": "globex"}}', "'k1...' appears twice"),
    ("a field twice in an entry", '{"k1": {"tenant": "acme", "tenant": "globex"}}', "'tenant' appears twice"),
    ("an empty key", '{"": {"tenant": "acme"}}', "empty key"),
]


@pytest.fixture(scope="module")
def dup_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dupkeys")
    make_pipeline(folder, keys=True)
    return folder


@pytest.mark.parametrize("name,raw,words", DUPLICATES, ids=[d[0] for d in DUPLICATES])
def test_a_keys_file_with_a_duplicate_is_refused_at_start_in_one_line(dup_folder, name, raw, words):
    import os
    import subprocess
    import sys

    from tests.serve.conftest import free_port

    (dup_folder / "keys.json").write_text(raw, encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    # A server that starts anyway (the later tenant silently winning) is ended by the timeout: the test fails.
    r = subprocess.run([sys.executable, "-m", "ragcost.cli.main", "serve", str(dup_folder / "kb.yaml"), "--port", str(free_port())],
                       capture_output=True, text=True, timeout=90, env=env, cwd=REPO)
    err = r.stderr.strip()
    assert r.returncode == 1 and len(err.splitlines()) == 1 and words in err and "keys.json" in err, err


# Entries that loaded, then failed later: a tenant given as a list stopped `serve` with a TypeError; a filter on an
# undeclared field loaded and then answered every client of that key with a 400 about the key's own filter (issue 39).
ENTRIES = [
    ("a tenant given as a list", '{"k1xx": {"tenant": ["acme", "globex"]}}',
     'the tenant of key k1xx... is ["acme", "globex"] (list); a tenant is one name'),
    ("an empty tenant", '{"k1xx": {"tenant": " "}}', 'the tenant of key k1xx... is " " (str)'),
    ("a filter on an undeclared field", '{"k1xx": {"tenant": "acme", "filter": {"colour": "red"}}}',
     "the filter of key k1xx... (tenant 'acme'): unknown filter field 'colour'; declared fields: "),
    ("a filter with an unknown operator", '{"k1xx": {"tenant": "acme", "filter": {"tenant": {"$near": "a"}}}}',
     "the filter of key k1xx... (tenant 'acme'): unknown operator '$near'"),
]


@pytest.mark.parametrize("name,raw,words", ENTRIES, ids=[d[0] for d in ENTRIES])
def test_a_keys_file_entry_that_cannot_work_is_refused_at_start_in_one_line(dup_folder, name, raw, words):
    test_a_keys_file_with_a_duplicate_is_refused_at_start_in_one_line(dup_folder, name, raw, words)


def test_a_key_filter_on_a_declared_field_still_loads(dup_folder):
    from ragcost.serve.keys import load_keys
    from ragcost.runtime.api import Session

    (dup_folder / "keys.json").write_text('{"k1xx": {"tenant": "acme", "filter": {"tenant": "acme", "year": {"$gte": 2020}}}}')
    check = Session(dup_folder / "kb.yaml", write_ledger=False).check_declared
    assert load_keys("file:keys.json", dup_folder, "kb.yaml", check=check).tenants == ["acme"]


def test_the_fixture_keys_still_load():
    from ragcost.serve.keys import parse_keys

    assert set(parse_keys(json.dumps(KEYS), "keys.json")) == set(KEYS)
