"""What the CLI prints is safe: valid JSON always, no markup or control sequences on the terminal, 130 on Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from ragcost.cli.text import dumps, terminal_safe
from tests.cli.conftest import run_cli, write_corpus, write_pipeline


def _strict_loads(text: str):
    def refuse(name: str):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


class TestJsonOutput:
    def test_non_finite_numbers_become_null(self):
        doc = _strict_loads(dumps({"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5], "c": np.float32("nan"), "d": np.arange(2)}))
        assert doc == {"a": None, "b": [None, None, 1.5], "c": None, "d": [0, 1]}

    def test_lone_surrogates_are_escaped_so_the_output_encodes(self):
        text = dumps({"t": "caf\udce9"})
        text.encode("utf-8")  # would raise UnicodeEncodeError if the surrogate were written raw
        assert _strict_loads(text) == {"t": "caf\udce9"}

    def test_query_json_with_an_infinite_cost_is_valid_json(self, kb, capsys, monkeypatch):
        from ragcost.runtime.query import QueryRun

        assert run_cli(capsys, "index", kb)[0] == 0
        monkeypatch.setattr(QueryRun, "total_usd", property(lambda self: float("inf")))
        code, out, err = run_cli(capsys, "query", kb, "refund", "--json")
        assert code == 0, err
        doc = _strict_loads(out)
        assert doc["total_usd"] is None and doc["usd_per_query"] is None


class TestTerminalText:
    def test_escape_sequences_and_c0_c1_controls_are_removed_newlines_and_tabs_kept(self):
        raw = "a\x1b[2J\x1b]0;title\x07b\x9b31mc\x00d\x7fe\x1bPdcs\x1b\\f\tg\nh\x85i"
        assert terminal_safe(raw) == "ab31mcdef\tg\nhi"

    def test_one_line_folds_newlines(self):
        assert terminal_safe("first\nsecond\r\n\tthird", one_line=True) == "first second third"

    def test_markup_is_kept_as_text(self):
        assert terminal_safe("[/] [link=x]y[/link]") == "[/] [link=x]y[/link]"


def test_ctrl_c_in_main_exits_130_with_one_line(kb, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("ragcost.runtime.indexing.run_index", interrupted)
    code, _, err = run_cli(capsys, "index", kb)
    assert code == 130
    assert err == "interrupted; what was committed is kept, rerun to finish\n"


@pytest.mark.slow
def test_sigint_during_index_exits_130_with_a_line(tmp_path):
    """A real Ctrl-C: SIGINT to `ragcost index` after its first committed batch."""
    docs = [(f"d{i}", f"Title {i}", f"Document {i} is about topic {i % 7} and item {i * 13 % 101}.", "t", 2020, ["x"]) for i in range(2000)]
    write_corpus(tmp_path / "kb.jsonl", docs)
    p = write_pipeline(tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # A shell that starts the test command in the background hands its children SIGINT ignored, and an
    # ignored SIGINT stays ignored in Python; a terminal's Ctrl-C reaches a default handler, as here.
    proc = subprocess.Popen([sys.executable, "-m", "ragcost.cli.main", "index", str(p)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("embedded "):
                assert not line.startswith("embedded 2000/"), "the indexer finished before it could be interrupted"
                proc.send_signal(signal.SIGINT)
                break
        rest = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(lines) + rest
    assert rest.strip().splitlines()[-1] == "interrupted; what was committed is kept, rerun to finish"
