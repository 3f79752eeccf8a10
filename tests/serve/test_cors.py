"""Opt-in CORS (issue 39, rough line): browsers on the listed origins may call the server; another origin is a
403 that runs nothing; without serve.cors_origins the server sends no CORS headers (as before)."""

from __future__ import annotations

import httpx
import pytest

from ragcost.cli.main import main
from tests.serve.conftest import ServerThread, variant

APP = "https://app.example.com"
ACME = {"authorization": "Bearer key-acme"}


def _requests(s: ServerThread) -> float:
    """Every request the routes counted (a request the CORS layer refused never reaches them)."""
    return sum(x.value for m in s.service.metrics.requests.collect() for x in m.samples if x.name.endswith("_total"))


@pytest.fixture(scope="module")
def cors(kb_served):
    with ServerThread(variant(kb_served, "cors.yaml", serve={"batch_window_ms": 5, "keys": "file:keys.json",
                                                              "cors_origins": [APP]})) as s:
        yield s


def test_a_listed_origin_is_preflighted_and_answered_with_its_header(cors):
    pre = httpx.options(cors.url + "/v1/chat/completions", headers={
        "origin": APP, "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type"})
    assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == APP
    assert "POST" in pre.headers["access-control-allow-methods"] and "authorization" in pre.headers["access-control-allow-headers"]
    r = httpx.post(cors.url + "/v1/query", headers={**ACME, "origin": APP}, json={"text": "refund"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP and r.json()["hits"]


@pytest.mark.parametrize("how", ["a simple text/plain POST", "a preflight"])
def test_another_origin_is_a_403_that_runs_nothing(cors, how):
    before = _requests(cors)
    if how == "a preflight":
        r = httpx.options(cors.url + "/v1/query", headers={"origin": "https://evil.example", "access-control-request-method": "POST"})
    else:  # no preflight in a browser: the request would be sent, only its answer hidden
        r = httpx.post(cors.url + "/v1/query", headers={**ACME, "origin": "https://evil.example", "content-type": "text/plain"},
                       content=b'{"text": "refund"}')
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    assert r.json()["error"] == {"message": "origin 'https://evil.example' is not allowed to call this server; add it to the "
                                            "pipeline's serve.cors_origins", "type": "permission_error", "param": None,
                                 "code": "origin_not_allowed"}
    assert _requests(cors) == before  # nothing ran: no route saw it


def test_a_client_without_an_origin_is_untouched(cors):
    r = httpx.post(cors.url + "/v1/query", headers=ACME, json={"text": "refund"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_an_origin_with_a_path_is_refused_at_load_naming_the_field(kb_served, capsys):
    p = variant(kb_served, "cors-bad.yaml", serve={"cors_origins": ["https://app.example.com/"]})
    assert main(["validate", str(p)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "serve.cors_origins: 'https://app.example.com/' is not an origin: write scheme://host[:port]" in err
