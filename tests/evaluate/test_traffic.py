"""The traffic eval prices at: one at a time at the book's rate, serve's window, or a batch size."""

from __future__ import annotations

import json

import pytest

from ragcost.errors import ConfigError
from ragcost.evaluate.traffic import SECONDS_PER_MONTH, resolve
from ragcost.runtime.pipeline import Pipeline
from tests.evaluate.conftest import write_spec


def _pipe(tmp_path, **extra) -> Pipeline:
    write_spec(tmp_path)
    cfg = json.loads((tmp_path / "pipe.yaml").read_text())
    cfg.update(extra)
    (tmp_path / "pipe.yaml").write_text(json.dumps(cfg))
    return Pipeline.load(tmp_path / "pipe.yaml", judge=False)


def test_one_at_a_time_is_the_default_at_the_books_declared_rate(tmp_path):
    t = resolve(_pipe(tmp_path))
    assert t.batch == 1 and t.how == "one"
    assert t.label == "one query at a time (the book's 1,000,000 queries/month, 0.38/s)"


def test_a_pipeline_that_sets_a_batch_window_is_priced_at_the_batch_serve_forms(tmp_path):
    # 0.38 queries/s and a 5 ms window: arrivals in the window join the first about 0.2% of the time
    assert resolve(_pipe(tmp_path, serve={"batch_window_ms": 5})).batch == 1
    # a window of 10 s at the same rate gathers 1 + 3.8 queries; capped by max_batch
    rate = 1_000_000 / SECONDS_PER_MONTH
    t = resolve(_pipe(tmp_path, serve={"batch_window_ms": 10_000}))
    assert t.how == "serve" and t.batch == round(1 + rate * 10) == 5 and "serve's 10000 ms window" in t.label
    assert resolve(_pipe(tmp_path, serve={"batch_window_ms": 10_000, "max_batch": 2})).batch == 2


@pytest.mark.parametrize("option, batch", [("one", 1), ("64", 64), (" 7 ", 7)])
def test_the_option_overrides_the_pipeline(tmp_path, option, batch):
    assert resolve(_pipe(tmp_path, serve={"batch_window_ms": 10_000}), option).batch == batch


@pytest.mark.parametrize("option", ["0", "lots", "5000", "-3", "2.5"])
def test_a_bad_option_is_one_line_naming_the_choices(tmp_path, option):
    with pytest.raises(ConfigError, match=r"^--traffic .*: use one, serve or a batch size 1-4096 \(e\.g\. --traffic 64"):
        resolve(_pipe(tmp_path), option)
