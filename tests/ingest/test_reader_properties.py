"""Property test (issue 18): whatever bytes a jsonl or csv source holds, a read ends in documents
plus report lines, or in one RagcostError whose message is a single line."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragcost.config.fields import parse_fields
from ragcost.errors import RagcostError
from ragcost.ingest.base import IngestReport
from ragcost.ingest.readers import dedupe, read_source

FIELDS = parse_fields({"year": "int", "score": "float", "tags": "list[str]", "owner": "str"})
SETTINGS = settings(derandomize=True, max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

tricky_text = st.text(st.sampled_from(["a", " ", "\n", "\r", "\u2028", "\u2029", "\u0085", "\x00", "é", "東", "\U0001F600", '"', ",", "\\", "{"]), max_size=12) | st.text(max_size=12)
scalar = st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats() | tricky_text
value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=6)
record = st.fixed_dictionaries({}, optional={"id": value, "_id": value, "title": value, "text": value, "year": value, "score": value, "tags": value, "owner": value})


def encoded_line(rec: dict, raw: bytes) -> st.SearchStrategy[bytes]:
    as_json = json.dumps(rec, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")
    return st.sampled_from([as_json, as_json.replace(b'"', b"", 1), raw, b"", as_json + b"\xff", b'{"id": ' + b"9" * 5000 + b"}",
                            b'{"id": "s", "text": "\\udc80"}', b'{"id": 1, "text": NaN}', b"[" * 3000])


jsonl_lines = st.lists(st.tuples(record, st.binary(max_size=20)).flatmap(lambda t: encoded_line(*t)), max_size=6)


def outcome(path, reader):
    report = IngestReport()
    try:
        docs = dedupe(read_source(str(path), reader, FIELDS, report), report)
    except RagcostError as e:
        assert "\n" not in str(e) and "\r" not in str(e), str(e)
        return
    for d in docs:
        assert isinstance(d.id, str) and d.id and (d.title.strip() or d.text.strip())
        for s in (d.id, d.title, d.text):
            s.encode("utf-8")  # storable: no lone surrogates reach the store
    for line in report.skipped + report.id_clashes:
        assert "\n" not in line and "\r" not in line
    assert report.read >= len(docs)


@SETTINGS
@given(lines=jsonl_lines, newline=st.sampled_from([b"\n", b"\r\n"]))
def test_any_jsonl_bytes_give_documents_and_report_lines_or_one_line_error(tmp_path_factory, lines, newline):
    p = tmp_path_factory.mktemp("prop") / "d.jsonl"
    p.write_bytes(newline.join(lines))
    outcome(p, "jsonl")


@SETTINGS
@given(data=st.binary(max_size=200))
def test_any_bytes_as_jsonl_or_csv_give_documents_and_report_lines_or_one_line_error(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("prop")
    for name, reader in (("d.jsonl", "jsonl"), ("d.csv", "csv")):
        (folder / name).write_bytes(data)
        outcome(folder / name, reader)


csv_cell = st.text(max_size=10) | st.sampled_from(["nan", "inf", "-Infinity", "1e400", "[1, 2]", '["a"]', "true", "", '"', "\u2028", "9" * 5000])


@SETTINGS
@given(rows=st.lists(st.lists(csv_cell, min_size=1, max_size=7), max_size=5), junk=st.binary(max_size=8))
def test_any_csv_rows_give_documents_and_report_lines_or_one_line_error(tmp_path_factory, rows, junk):
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["id", "title", "text", "year", "score", "tags", "owner"])
    for r in rows:
        w.writerow(r)
    p = tmp_path_factory.mktemp("prop") / "d.csv"
    p.write_bytes(buf.getvalue().encode("utf-8", "surrogatepass") + junk)
    outcome(p, "csv")
