"""A request's k is the number of results the user gets, whatever the pipeline's re-rank stages keep (#42 item 7).

Before, ``-k 3`` set the retrieve stage's fetch size and the re-rank stages kept their own top_n: the demo
(retrieve 20, hybrid top_n 5) returned 5 results for ``-k 3``, and ``-k 50`` returned 5 too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ragcost
from ragcost.runtime.pipeline import Pipeline
from tests.cli.conftest import run_cli, write_corpus, write_pipeline

# retrieve 6 -> exact rescore keeps 5 -> BM25 hybrid keeps 4: two re-ranks, the last one decides the count.
CHAIN = [{"type": "retrieve", "k": 6}, {"type": "rerank", "backend": "rescore", "top_n": 5},
         {"type": "rerank", "backend": "hybrid", "top_n": 4}]
QUESTION = "how do I get my money back for a purchase?"


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> Path:
    from ragcost.runtime.indexing import run_index

    folder = tmp_path_factory.mktemp("k")
    write_corpus(folder / "kb.jsonl")
    path = write_pipeline(folder, stages=CHAIN, useful={"threshold": 0.02})  # RRF scores: at most 2/61
    pipe = Pipeline.load(path)
    run_index(pipe)
    pipe.close()
    return path


def ids(answer) -> list[str]:
    return [h["doc_id"] for h in answer.hits]


def test_sizes_follow_the_request_not_the_stages(chain):
    pipe = Pipeline.load(chain)
    try:
        assert pipe.query_sizes(None) == (6, None)  # the pipeline's own: fetch 6, each re-rank its top_n
        assert pipe.query_sizes(2) == (6, 2)  # fetch the pipeline's candidates, keep 2
        assert pipe.query_sizes(9) == (9, 9)  # fetch at least what is asked for
        finals = [st.final for st in pipe.stages() if st.type == "rerank"]
        assert finals == [False, True]  # only the last re-rank cuts to the request's k
    finally:
        pipe.close()


def test_without_a_rerank_k_is_what_retrieve_fetches(tmp_path):
    pipe = Pipeline.load(write_pipeline(tmp_path, stages=[{"type": "retrieve", "k": 3}]))
    try:
        assert pipe.query_sizes(None) == (3, None)
        assert pipe.query_sizes(7) == (7, None)
    finally:
        pipe.close()


def test_the_api_returns_exactly_k_results_and_a_smaller_k_is_a_prefix(chain):
    with ragcost.open(chain, write_ledger=False) as s:
        default = s.query(QUESTION)
        two = s.query(QUESTION, k=2)
        nine = s.query(QUESTION, k=9)
        one = s.query(QUESTION, k=1)
    assert len(default.hits) == 4  # the last re-rank's top_n
    assert len(two.hits) == 2 and len(one.hits) == 1
    # Same candidates, same fusion: the first results of the pipeline's own answer, in its order.
    assert ids(two) == ids(default)[:2] and ids(one) == ids(default)[:1]
    assert len(nine.hits) == 9  # more than any stage keeps: retrieve fetched 9 and both re-ranks kept them


def test_the_cli_prints_k_results(chain, capsys):
    code, out, err = run_cli(capsys, "query", chain, QUESTION, "-k", "2", "--json", "--no-ledger")
    assert code == 0, err
    assert len(json.loads(out)["queries"][0]["hits"]) == 2
    code, out, err = run_cli(capsys, "query", chain, QUESTION, "-k", "9", "--json", "--no-ledger")
    assert code == 0, err
    assert len(json.loads(out)["queries"][0]["hits"]) == 9


CACHED = [{"type": "cache"}, *CHAIN, {"type": "generate", "backend": "extractive"}, {"type": "cache_write"}]


def test_an_explicit_k_is_its_own_cache_scope(tmp_path):
    """An answer made over 2 results is not served to a request for the pipeline's 4, nor the other way: the
    fetch size alone (6 for both) would not tell them apart."""
    from ragcost.runtime.indexing import run_index

    write_corpus(tmp_path / "kb.jsonl")
    path = write_pipeline(tmp_path, stages=CACHED, useful={"threshold": 0.02})
    pipe = Pipeline.load(path)
    run_index(pipe)
    pipe.close()
    q = "How do I reset my password?"
    with ragcost.open(path, write_ledger=False) as s:
        first = s.query(q)
        again = s.query(q)
        two = s.query(q, k=2)
        two_again = s.query(q, k=2)
        own_again = s.query(q)
    assert first.outcome_stage != "cache" and len(first.hits) == 4
    assert again.outcome_stage == "cache" and ids(again) == ids(first)  # the cache works here
    assert two.outcome_stage != "cache" and len(two.hits) == 2  # not the 4-result answer
    assert two_again.outcome_stage == "cache" and ids(two_again) == ids(two)
    assert own_again.outcome_stage == "cache" and ids(own_again) == ids(first)
