"""tune picks what eval picks, on real judgments: Cranfield's grid and SciFact's scifact-tune index grid.

Each grid is evaluated whole once (the fastest runtime's cached vectors: nothing is embedded), then tune walks
it over eval's own measurements (``tune(..., measured=...)``), so the two picks differ only if the walk's
decisions do, never by timing noise between two runs. Either the picks are the same, or tune names the
assumption that failed on the data (and then must still land on eval's pick, having measured what it skipped).
SciFact runs its first 150 judged queries over the suite's sample of its corpus (tests/datasets.py: every judged
abstract and each query's BM25 near-misses, 1,500 of 5,183) to keep the suite short; the whole corpus and all 300
queries agree too (docs/tasks/eval-and-tune.md).
"""

from __future__ import annotations

import pytest

from ragcost.config.pipeline import EmbedConfig
from ragcost.evaluate.run import run_eval
from ragcost.evaluate.spec import load_spec
from ragcost.evaluate.tune import ASSUMPTIONS, summary_lines, tune
from tests.conftest import EVAL_CACHE, fastest_runtime
from tests.datasets import scifact_sample
from tests.evaluate.conftest import REPO

pytestmark = pytest.mark.slow


def _spec(name: str, max_queries=None, dataset=None):
    ls = load_spec(REPO / "eval" / f"{name}.yaml")
    if dataset is not None:  # SciFact: the suite's sample of its corpus (tests/datasets.py)
        ls.dataset_path = dataset
    ls.spec.embedders = [EmbedConfig.model_validate(fastest_runtime())]  # the cached runtime (one variant)
    ls.spec.max_queries = max_queries
    ls.spec.served_rounds = 1  # eval's pick and tune's are read from the same measurements: one timed pass each
    return ls


@pytest.mark.parametrize("name, max_queries", [("cranfield-indexes", None), ("scifact-tune", 150)])
def test_tune_picks_what_eval_picks(name, max_queries, shared_data):
    # priced in batches of 64 (each pass of the served path embeds the queries; one at a time: 750 s of the suite, 100
    # here). tune prices its own bound at the same traffic: at its default, one at a time, a query's embedding alone
    # cost more than whole configurations measured in 64s, and SciFact's ivf-flat d384, eval's pick in CI, was
    # skipped as "dominated before building" (stop 50)
    dataset = scifact_sample(shared_data) if name.startswith("scifact") else None
    full = run_eval(_spec(name, max_queries, dataset), EVAL_CACHE, traffic="64")
    assert full.embedded_documents == 0
    rec = next(r for r in full.ok() if r.recommended)
    rep = tune(_spec(name, max_queries, dataset), None, EVAL_CACHE, measured=full.results, traffic="64")
    text = "\n".join(summary_lines(rep))
    print(f"{name}: eval {rec.name}, tune {rep.chosen.name}, {rep.ran} of {rep.full_grid} measured; failed {rep.failed}")
    assert rep.floor == pytest.approx(1 - full.within_pct / 100)  # the same rule: eval's within_pct
    assert rep.full_grid == len(full.ok()) and rep.ran < rep.full_grid
    assert rep.chosen.name == rec.name or rep.failed, text
    assert rep.chosen.name == rec.name, text  # a failed assumption is named and its skips measured: still eval's pick
    for s in rep.skips:  # every skip names the assumption that allowed it
        assert s.assumption in ASSUMPTIONS and s.why
    assert "assumptions checked on the data:" in text
    assert rep.power is not None and rep.power.line() in text
