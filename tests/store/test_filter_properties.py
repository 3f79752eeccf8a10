"""Property test: generated filters against a small real DuckDB store give a result or one clean line.

The only acceptable outcomes of ``matching_labels`` are sorted int64 labels or a one-line
``RagcostError`` (no newline, no SQL). Seeded and bounded, so CI runs it the same way in seconds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragcost.config.fields import parse_fields
from ragcost.errors import RagcostError
from ragcost.store.filters import FIELD_OPS, LOGIC_OPS
from ragcost.store.sql import SQLStore
from ragcost.testing.store import record

FIELDS = {"tenant": "str", "year": "int", "score": "float", "draft": "bool", "tags": "list[str]", "ranks": "list[int]"}
SETTINGS = settings(derandomize=True, max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

huge_ints = st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**400, -(10**30)])
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), huge_ints,
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["acme", "globex", "x", "'; DROP TABLE x; --", "naïve 数据 🚀", "a\x00b", "\u2028", "%_"]),
)
values = st.one_of(scalars, st.lists(scalars, max_size=5), st.dictionaries(st.text(max_size=4), scalars, max_size=2))
field_names = st.sampled_from([*FIELDS, "id", "title", "nope", "$where", "", "tenant "])
operators = st.sampled_from([*FIELD_OPS, "$like", "$regex", "$size", "eq"])
operator_objects = st.dictionaries(operators, st.one_of(values, st.dictionaries(operators, values, max_size=2)),
                                   min_size=0, max_size=3)
any_leaves = st.dictionaries(field_names, st.one_of(values, operator_objects), min_size=1, max_size=3)

# well-typed conditions, so most examples reach the database rather than stop at validation
TYPED = {
    "str": st.one_of(st.text(max_size=8), st.sampled_from(["acme", "globex", "x", "y", "naïve 数据 🚀"])),
    "int": st.one_of(st.integers(-3, 2030), st.integers(-(2**63), 2**63 - 1), huge_ints),
    "float": st.one_of(st.floats(-1e6, 1e6), st.floats(allow_nan=True, allow_infinity=True)),
    "bool": st.booleans(),
}
BASE = {"tenant": "str", "id": "str", "title": "str", "year": "int", "ranks": "int", "score": "float",
        "draft": "bool", "tags": "str"}


def _typed_leaf(field: str) -> st.SearchStrategy:
    v = TYPED[BASE[field]]
    cond = st.one_of(
        v, st.builds(lambda op, x: {op: x}, st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]), v),
        st.builds(lambda op, xs: {op: xs}, st.sampled_from(["$in", "$nin", "$all"]), st.lists(v, max_size=6)),
        st.builds(lambda x: {"$exists": x}, st.booleans()),
        st.builds(lambda x: {"$not": {"$gte": x}}, v),
    )
    return st.builds(lambda c: {field: c}, cond)


typed_leaves = st.sampled_from(sorted(BASE)).flatmap(_typed_leaf)
leaves = st.one_of(typed_leaves, typed_leaves, typed_leaves, any_leaves)


def _combine(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.builds(lambda xs: {"$and": xs}, st.lists(children, max_size=3)),
        st.builds(lambda xs: {"$or": xs}, st.lists(children, max_size=3)),
        st.builds(lambda x: {"$not": x}, children),
        st.builds(lambda a, b: {**a, **b}, children, children),
        st.builds(lambda op, x: {op: x}, st.sampled_from([*LOGIC_OPS, "$nor"]), st.one_of(children, values)),
    )


expressions = st.recursive(leaves, _combine, max_leaves=12)


def _nested(depth: int, inner: dict) -> dict:
    for i in range(depth):
        inner = {"$not": inner} if i % 2 else {"$and": [inner]}
    return inner


deep = st.builds(_nested, st.integers(1, 80), leaves)
filters = st.one_of(expressions, expressions, expressions, deep, st.builds(json.dumps, expressions), values)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    url = f"duckdb:///{tmp_path_factory.mktemp('props')}/p.duckdb"
    with SQLStore(url, "p", parse_fields(FIELDS)) as s:
        s.write([
            record("a", tenant="acme", year=2021, score=0.5, draft=False, tags=["x", "y"], ranks=[1, 2]),
            record("b", tenant="globex", year=2**62, score=-1e300, draft=True, tags=["x"], ranks=[-(2**63)]),
            record("c", tenant="naïve 数据 🚀", tags=[]),
            record("d"),
        ])
        yield s


@SETTINGS
@given(expr=filters)
def test_a_generated_filter_gives_sorted_labels_or_one_clean_line(store, expr):
    try:
        labels = store.matching_labels(expr)
    except RagcostError as e:
        msg = str(e)
        assert msg and "\n" not in msg and "\r" not in msg, msg
        assert "SELECT" not in msg.upper() and "FROM rc_" not in msg and len(msg) < 400, msg
        return
    assert isinstance(labels, np.ndarray) and labels.dtype == np.int64
    assert list(labels) == sorted(set(labels.tolist()))
    assert set(labels.tolist()) <= set(store.vectors()[0].tolist())
