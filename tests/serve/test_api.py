"""The Python API the CLI and server are layers over: ragcost.open(path).query / astream; keys loading."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

import ragcost
from ragcost.errors import ConfigError
from ragcost.serve.keys import load_keys
from tests.serve.conftest import ledger_rows


class TestOpen:
    def test_import_ragcost_stays_light(self):
        code = "import ragcost, sys; print(any(m.startswith(('ragcost.runtime', 'torch', 'sqlalchemy')) for m in sys.modules))"
        assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"

    def test_query_answers_filters_and_writes_its_cost_to_the_ledger(self, kb_served):
        with ragcost.open(kb_served) as p:
            r = p.query("how do I get a refund?", filter={"tenant": "acme"}, k=2, tenant="acme")
        assert r.ok and r.answer and "refund" in r.answer.lower()
        assert [h["metadata"]["tenant"] for h in r.hits] == ["acme", "acme"]
        qrows, srows = ledger_rows(kb_served)
        q = next(q for q in qrows if q["query_id"] == r.id)
        assert q["cost_usd"] == pytest.approx(r.cost) and q["tenant"] == "acme"
        assert sorted(x["stage"] for x in srows if x["query_id"] == r.id) == sorted(x["stage"] for x in r.rows)

    def test_astream_yields_text_then_the_answer(self, kb_served):
        async def collect():
            with ragcost.open(kb_served, write_ledger=False) as p:
                return [ev async for ev in p.astream("reset password")]

        events = asyncio.run(collect())
        assert events[-1]["type"] == "done" and events[-1]["answer"].ok
        text = "".join(e["text"] for e in events if e["type"] == "text")
        assert text == events[-1]["answer"].answer

    def test_a_filter_on_an_undeclared_field_is_refused_before_running(self, kb_served):
        with ragcost.open(kb_served, write_ledger=False) as p:
            with pytest.raises(ragcost.errors.RagcostError, match="colour"):
                p.query("x", filter={"colour": "red"})


class TestKeys:
    def test_keys_come_from_an_env_var(self, tmp_path, monkeypatch):
        monkeypatch.setenv("RC_KEYS", json.dumps({"k1": {"tenant": "acme", "filter": {"tenant": "acme"}}}))
        keys = load_keys("env:RC_KEYS", tmp_path, "kb.yaml:3")
        assert keys.lookup("k1").name == "acme"
        assert keys.lookup("k2") is None and keys.lookup(None) is None and keys.lookup("") is None

    def test_an_unset_env_var_is_one_line_naming_it(self, tmp_path, monkeypatch):
        monkeypatch.delenv("RC_NOPE", raising=False)
        with pytest.raises(ConfigError, match="kb.yaml:3: serve.keys names env var 'RC_NOPE', which is not set"):
            load_keys("env:RC_NOPE", tmp_path, "kb.yaml:3")

    def test_a_missing_keys_file_names_it(self, tmp_path):
        with pytest.raises(ConfigError, match="serve.keys file .*keys.json.* not found"):
            load_keys("file:keys.json", tmp_path, "kb.yaml:3")

    def test_keys_in_the_yaml_itself_are_refused(self):
        from pydantic import ValidationError

        from ragcost.config.pipeline import ServeConfig

        with pytest.raises(ValidationError, match="file:PATH or env:VAR"):
            ServeConfig(keys="sk-123")
