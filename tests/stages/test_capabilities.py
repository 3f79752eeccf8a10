"""Stages declare what they can do (``Stage.embeds_queries``, ``fetches_hits``, ``reorders_hits``,
``makes_answer``, ``remembers_queries``, ``optional``, ``eval_skips``, ``final_k``, ``answer_checks``,
``holds_answer``, ``sentence_checks``): nothing outside ``ragcost/stages/`` compares a stage's type string,
so a plugin's stage opts into what the built-ins get by declaring it."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest

from ragcost.stages.base import Stage, StageParams

PACKAGE = Path(__file__).resolve().parents[2] / "ragcost"
TYPES = r"(?:embed|retrieve|rerank|generate|guard|cache|cache_write|route)"
COMPARISONS = [
    re.compile(r"(?:==|!=)\s*['\"]" + TYPES + r"['\"]"),  # st.type == "rerank"
    re.compile(r"['\"]" + TYPES + r"['\"]\s*(?:==|!=|(?:not\s+)?in\b)"),  # "generate" in types
    re.compile(r"\.type\s+(?:not\s+)?in\s*[\(\[\{]"),  # cls.type in ("embed", "retrieve")
    re.compile(r"\.type\.startswith\("),  # st.type.startswith("cache")
]


def comparisons(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if "stages" in path.relative_to(root).parts:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(r.search(line) for r in COMPARISONS):
                found.append(f"{path.relative_to(root.parent)}:{n}: {line.strip()}")
    return found


def test_no_stage_type_is_compared_outside_the_stages_package():
    assert comparisons(PACKAGE) == []


def test_the_rule_catches_each_form_it_names(tmp_path):
    pkg = tmp_path / "ragcost"
    (pkg / "runtime").mkdir(parents=True)
    (pkg / "stages").mkdir()
    (pkg / "runtime" / "a.py").write_text('gens = [s for s in st if s.type == "generate"]\nok = "guard" in types\n'
                                          'x = cls.type in ("embed", "retrieve")\ny = st.type.startswith("cache")\n')
    (pkg / "stages" / "b.py").write_text('if self.type == "rerank": pass\n')  # the stages' own business
    assert [line.split(":")[1] for line in comparisons(pkg)] == ["1", "2", "3", "4"]


class _Params(StageParams):
    top_n: int = 2


class PluginReranker(Stage):
    """A plugin's re-ranking stage under a type name of its own."""

    type = "my-reorder"
    Params = _Params
    reorders_hits = True
    optional = True

    @classmethod
    def final_k(cls, params: _Params) -> Optional[int]:
        return params.top_n

    def run(self, batch, usage):
        return None


class PluginAnswerCheck(Stage):
    type = "my-answer-check"
    Params = StageParams

    def holds_answer(self) -> bool:
        return True

    def sentence_checks(self):
        return None  # judges the whole answer only

    def run(self, batch, usage):
        return None


def _specs(*extra):
    from ragcost.stages.retrieve import Retrieve

    return [(Retrieve, Retrieve.Params(k=8)), *extra]


def test_a_plugin_reranker_cuts_the_final_k_and_counts_in_the_judges_fingerprint():
    from ragcost.runtime.judge import final_k

    assert final_k(_specs()) == 8
    assert final_k(_specs((PluginReranker, _Params(top_n=3)))) == 3


def test_a_plugin_stage_is_one_ablation_leaves_out_by_its_own_label():
    from ragcost.evaluate.ablate import optional_stages

    got = optional_stages(_specs((PluginReranker, _Params(name="mine"))))
    assert [(o.position, o.label) for o in got] == [(1, "mine")]


def test_serve_holds_a_stream_for_a_plugin_stage_that_may_change_the_answer():
    from ragcost.serve.gate import SentenceGate
    from ragcost.serve.service import holds_answers

    pipe = SimpleNamespace(stages=lambda: [PluginAnswerCheck(StageParams(), ctx=None)])
    assert holds_answers(pipe) and SentenceGate.of(pipe) is None  # held whole: no sentence may leave first


@pytest.mark.parametrize("flag, types", [("embeds_queries", {"embed"}), ("fetches_hits", {"retrieve"}),
                                         ("reorders_hits", {"rerank"}), ("makes_answer", {"generate"}),
                                         ("remembers_queries", {"cache", "cache_write"}),
                                         ("optional", {"rerank", "guard", "cache", "route"})])
def test_each_built_in_declares_what_the_rest_of_ragcost_used_to_read_from_its_type(flag, types):
    import ragcost.stages  # noqa: F401
    from ragcost.stages.base import stage_registry
    from ragcost.stages.embed import EmbedQueries

    built_in = [EmbedQueries] + [c for n in stage_registry.names() if (c := stage_registry.get(n)).__module__.startswith("ragcost.stages")]
    assert {c.type for c in built_in if getattr(c, flag)} == types


def test_eval_skips_a_cache_and_a_route_and_says_why():
    import ragcost.stages  # noqa: F401
    from ragcost.stages.base import stage_registry

    skips = {n: stage_registry.get(n).eval_skips for n in ("cache", "route", "retrieve", "rerank", "guard", "generate")}
    assert skips["cache"] and skips["route"] and not any(skips[n] for n in ("retrieve", "rerank", "guard", "generate"))
