"""Metadata filters: every operator on every field type, logic, hostile values, and each error."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from ragcost.config.fields import parse_fields
from ragcost.errors import FilterError
from ragcost.records import SourceDocument
from ragcost.store.filters import compile_filter, parse_filter
from ragcost.store import ChunkRecord, DocumentRecord, content_hash
from ragcost.store.sql import SQLStore as Store

FIELDS = parse_fields({"tenant": "str", "year": "int", "score": "float", "draft": "bool", "tags": "list[str]", "ranks": "list[int]"})
HOSTILE = ["O'Brien", '"quoted"', "'; DROP TABLE x; --", "100%", "a_b", "ab", "naïve — 数据 🚀", "SELECT * FROM rc_f_documents", "back\\slash"]
DOCS = {
    "a": dict(tenant="acme", year=2021, score=0.5, draft=False, tags=["billing", "eu"], ranks=[1, 2]),
    "b": dict(tenant="acme", year=2023, score=1.5, draft=True, tags=["billing"], ranks=[3]),
    "c": dict(tenant="globex", year=2024, score=2.5, draft=False, tags=["support", "us"], ranks=[]),
    "d": dict(tenant="globex", year=2025, tags=["eu"]),
    "e": dict(),
}


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def store(request, tmp_path_factory):
    """The same filters against the embedded default and PostgreSQL."""
    with contextlib.ExitStack() as stack:
        if request.param == "duckdb":
            url = f"duckdb:///{tmp_path_factory.mktemp('filters')}/f.duckdb"
        else:
            from tests.conftest import postgres_database

            url = stack.enter_context(postgres_database())
        yield from _filled(url)


def _filled(url: str):
    recs = []
    docs = {**DOCS, **{f"h{i}": dict(tenant=v, tags=[v]) for i, v in enumerate(HOSTILE)}}
    for doc_id, meta in docs.items():
        doc = SourceDocument(id=doc_id, text=f"text of {doc_id}", title=f"title {doc_id}", metadata=meta)
        recs.append(DocumentRecord(doc, content_hash(doc), [ChunkRecord(doc.text, 0, 1, 1, np.zeros(4, np.float32))]))
    with Store(url, "f", FIELDS) as s:
        s.write(recs)
        yield s


def ids(store: Store, expr, within=DOCS) -> set[str]:
    """Ids of the documents whose chunks match (limited to ``within`` so the hostile rows stay out of the way)."""
    found = {c["doc_id"] for c in store.chunks(store.matching_labels(expr))}
    return found & set(within) if within is not None else found


class TestScalarOperators:
    @pytest.mark.parametrize("expr, expected", [
        ({"tenant": "acme"}, {"a", "b"}),
        ({"tenant": {"$eq": "globex"}}, {"c", "d"}),
        ({"tenant": {"$ne": "acme"}}, {"c", "d", "e"}),  # missing fields match $ne, as in MongoDB
        ({"tenant": {"$in": ["acme", "nobody"]}}, {"a", "b"}),
        ({"tenant": {"$nin": ["acme"]}}, {"c", "d", "e"}),
        ({"tenant": {"$gt": "b"}}, {"c", "d"}),
        ({"year": 2023}, {"b"}),
        ({"year": {"$gte": 2023}}, {"b", "c", "d"}),
        ({"year": {"$gt": 2023, "$lt": 2025}}, {"c"}),
        ({"year": {"$lte": 2021}}, {"a"}),
        ({"year": {"$in": []}}, set()),
        ({"score": {"$gt": 1}}, {"b", "c"}),
        ({"score": 0.5}, {"a"}),
        ({"score": {"$lt": 2.0}}, {"a", "b"}),
        ({"draft": True}, {"b"}),
        ({"draft": {"$ne": True}}, {"a", "c", "d", "e"}),
        ({"draft": {"$gt": False}}, {"b"}),  # a comparison with a bool is a bound value (found by the property test)
        ({"score": {"$exists": True}}, {"a", "b", "c"}),
        ({"score": {"$exists": False}}, {"d", "e"}),
        ({"score": None}, {"d", "e"}),
        ({"year": {"$not": {"$gte": 2023}}}, {"a", "e"}),
        ({"id": {"$in": ["a", "c"]}}, {"a", "c"}),
        ({"title": "title b"}, {"b"}),
        ({}, {"a", "b", "c", "d", "e"}),
        (None, {"a", "b", "c", "d", "e"}),
    ])
    def test_a_scalar_filter_matches_the_expected_documents(self, store, expr, expected):
        assert ids(store, expr) == expected


class TestListOperators:
    @pytest.mark.parametrize("expr, expected", [
        ({"tags": "billing"}, {"a", "b"}),
        ({"tags": {"$eq": "eu"}}, {"a", "d"}),
        ({"tags": {"$ne": "billing"}}, {"c", "d", "e"}),
        ({"tags": {"$in": ["us", "eu"]}}, {"a", "c", "d"}),
        ({"tags": {"$all": ["billing", "eu"]}}, {"a"}),
        ({"tags": {"$nin": ["billing", "us"]}}, {"d", "e"}),
        ({"tags": {"$exists": False}}, {"e"}),
        ({"ranks": {"$exists": True}}, {"a", "b"}),  # an empty list stores nothing
        ({"ranks": {"$gte": 2}}, {"a", "b"}),  # any element
        ({"ranks": {"$lt": 2}}, {"a"}),
        ({"ranks": 3}, {"b"}),
    ])
    def test_a_list_filter_matches_the_expected_documents(self, store, expr, expected):
        assert ids(store, expr) == expected


class TestLogic:
    @pytest.mark.parametrize("expr, expected", [
        ({"tenant": "acme", "year": {"$gte": 2022}}, {"b"}),
        ({"$and": [{"tenant": "globex"}, {"tags": "eu"}]}, {"d"}),
        ({"$or": [{"year": 2021}, {"tags": "us"}]}, {"a", "c"}),
        ({"$not": {"tenant": "acme"}}, {"c", "d", "e"}),
        ({"$not": {"$or": [{"tenant": "acme"}, {"year": {"$gt": 2024}}]}}, {"c", "e"}),
        ({"$and": []}, {"a", "b", "c", "d", "e"}),
        ({"tenant": "acme", "$or": [{"draft": True}, {"tags": "eu"}]}, {"a", "b"}),
    ])
    def test_logic_combines_expressions(self, store, expr, expected):
        assert ids(store, expr) == expected

    def test_count_matching_counts_the_selected_chunks(self, store):
        assert store.count_matching({"tenant": "acme"}) == 2
        assert store.count_matching('{"year": {"$gte": 2024}}') == 2

    def test_matching_labels_are_sorted_int64(self, store):
        labels = store.matching_labels({"tags": {"$in": ["eu", "billing"]}})
        assert labels.dtype == np.int64 and list(labels) == sorted(labels)


class TestHostileValues:
    @pytest.mark.parametrize("value", HOSTILE)
    def test_a_hostile_value_is_a_plain_bound_value_that_matches_exactly(self, store, value):
        before = store.count_documents()
        expected = {f"h{HOSTILE.index(value)}"}
        assert ids(store, {"tenant": value}, None) == expected
        assert ids(store, {"tags": {"$in": [value]}}, None) == expected
        assert ids(store, {"$or": [{"tenant": {"$eq": value}}, {"id": value}]}, None) == expected
        assert store.count_documents() == before

    def test_percent_and_underscore_are_not_wildcards(self, store):
        assert ids(store, {"tenant": "a_b"}, None) == {"h4"}  # not "ab"
        assert ids(store, {"tenant": "100%"}, None) == {"h3"}

    def test_the_compiled_sql_carries_values_only_as_parameters(self, store):
        clause = compile_filter({"tenant": "'; DROP TABLE x; --", "tags": {"$all": ["x"]}}, FIELDS, store.documents, store.values)
        sql = str(clause.compile(compile_kwargs={}))
        assert "DROP" not in sql and "'" not in sql


class TestErrors:
    @pytest.mark.parametrize("expr, message", [
        ({"nope": 1}, r"unknown filter field 'nope'; declared fields: draft, id, ranks, score, tags, tenant, title, year"),
        ({"year": {"$like": 1}}, r"unknown operator '\$like' on field 'year'; known: \$eq, \$ne"),
        ({"$xor": []}, r"unknown operator '\$xor'; known: \$and, \$or, \$not"),
        ({"year": "2023"}, r"field 'year' expects int values \(field is int\); got str '2023'"),
        ({"draft": {"$eq": 1}}, r"field 'draft' expects bool values.*got int 1"),
        ({"tags": {"$in": [1]}}, r"field 'tags' expects str values \(field is list\[str\]\); got int 1"),
        ({"year": {"$in": 2023}}, r"\$in on field 'year' takes a list, got int 2023"),
        ({"$or": []}, r"\$or needs at least one expression"),
        ({"$or": {"year": 1}}, r"\$or takes a list of expressions"),
        ({"year": {"$all": [1]}}, r"\$all applies to list fields; 'year' is int"),
        ({"year": {"$exists": "yes"}}, r"\$exists on field 'year' takes true or false"),
        ({"year": {"$gt": None}}, r"\$gt on field 'year' needs a int value, got null"),
        ({"year": {}}, r"empty operator object"),
        ({"$not": [1]}, r"filter expression must be an object"),
    ])
    def test_a_bad_expression_is_a_one_line_error_naming_the_problem(self, store, expr, message):
        with pytest.raises(FilterError, match=message) as info:
            compile_filter(expr, FIELDS, store.documents, store.values)
        assert "\n" not in str(info.value)


class TestParseFilter:
    def test_json_text_becomes_a_dict(self):
        assert parse_filter('{"year": {"$gte": 2023}}') == {"year": {"$gte": 2023}}

    def test_none_and_an_empty_object_mean_no_filter(self):
        assert parse_filter(None) is None and parse_filter({}) is None

    @pytest.mark.parametrize("text", ["", "  ", "\t\n"])
    def test_blank_text_is_refused_like_null_and_a_list(self, text):
        # issue 28: `--filter "$UNSET"` searched every tenant's documents while `null` and `[]` were refused
        with pytest.raises(FilterError, match=r"filter '.*' is empty; give a JSON object"):
            parse_filter(text)

    def test_malformed_json_names_the_position_and_shows_an_example(self):
        with pytest.raises(FilterError, match=r'filter is not valid JSON: Expecting .* at char 9; example: \{"year": \{"\$gte": 2023\}\}'):
            parse_filter('{"year": }')

    def test_a_non_object_is_refused(self):
        with pytest.raises(FilterError, match="filter must be a JSON object, got list"):
            parse_filter("[1, 2]")
