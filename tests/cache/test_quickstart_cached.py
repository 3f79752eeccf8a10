"""The second demo pipeline: the quickstart chain with a cache in front; repeated and reworded demo questions hit."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragcost.runtime.load import load_pipeline

REPO = Path(__file__).resolve().parents[2]
CACHED = REPO / "pipelines" / "quickstart-cached.yaml"


def test_it_is_the_quickstart_chain_with_a_cache_in_front():
    lp = load_pipeline(CACHED)
    plain = load_pipeline(REPO / "pipelines" / "quickstart.yaml")
    types = [cls.type for cls, _ in lp.stage_specs]
    assert types == ["guard", "cache", "retrieve", "rerank", "generate", "guard", "cache_write"]
    assert [c.type for c, _ in lp.stage_specs if c.type not in ("cache", "cache_write")] == [c.type for c, _ in plain.stage_specs]
    assert lp.config.name == plain.config.name  # the demo's store and index


@pytest.mark.slow  # embeds the 79 pydoc topics (~860 chunks): minutes on a shared 2-core machine
def test_repeated_and_reworded_demo_questions_hit(quickstart_index):
    from ragcost.records import QueryState
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(quickstart_index(CACHED))  # the session's built quickstart store and index, copied
    try:
        summary = run_index(pipe)
        assert summary.embedded_chunks == 0 and summary.sentences_embedded == 0  # the same store and index as the quickstart: nothing to embed again
        pipe.warm_up()

        def ask(text):
            s = QueryState(text=text, id=text, k=20)
            pipe.run([s])
            return s

        first = ask("What is a lambda expression?")
        assert first.cache is None and first.answer
        assert ask("what is a lambda expression").cache["tier"] in ("exact", "semantic")
        para = ask("Could you tell me what a lambda expression is?")
        assert para.cache is not None and para.cache["tier"] == "semantic" and para.answer == first.answer
        ask("When is the finally clause executed?")
        near = ask("When is the finally clause not executed?")
        assert near.cache is None and near.cache_trip["refused"][0]["family"] == "negation"
    finally:
        pipe.close()
