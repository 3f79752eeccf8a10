"""Source readers on small files written here, and on the real BEIR folders in shared data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ragcost.config.fields import parse_fields
from ragcost.errors import IngestError, UnknownNameError
from ragcost.ingest.base import IngestReport
from ragcost.ingest.readers import dedupe, infer_reader, read_source, reader_registry

FIELDS = parse_fields({"year": "int", "score": "float", "draft": "bool", "tags": "list[str]"})


def read(path, reader=None, fields=FIELDS):
    report = IngestReport()
    docs = list(read_source(str(path) if path else None, reader, fields, report))
    return docs, report


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


class TestJsonl:
    def test_records_become_documents_with_declared_metadata_only(self, tmp_path):
        p = write_jsonl(tmp_path / "docs.jsonl", [
            {"id": "1", "title": "One", "text": "first", "year": 2024, "tags": ["a"], "other": "ignored"},
            {"_id": 2, "text": "second", "score": 3},
        ])
        docs, report = read(p)
        assert [(d.id, d.title, d.text) for d in docs] == [("1", "One", "first"), ("2", "", "second")]
        assert docs[0].metadata == {"year": 2024, "tags": ["a"]} and docs[1].metadata == {"score": 3.0}
        assert docs[0].origin == f"{p}:1" and report.read == 2 and report.skipped == []

    def test_gzipped_jsonl_is_read(self, tmp_path):
        p = tmp_path / "docs.jsonl.gz"
        p.write_bytes(gzip.compress(b'{"id": "1", "text": "zipped"}\n'))
        assert [d.text for d in read(p)[0]] == ["zipped"]

    def test_a_malformed_line_and_a_record_without_id_are_skipped_with_file_and_line(self, tmp_path):
        p = tmp_path / "docs.jsonl"
        p.write_text('{"id": "1", "text": "ok"}\n{"id": "2", "text": \n[1, 2]\n{"text": "no id"}\n\n{"id": "3", "text": "ok"}\n')
        docs, report = read(p)
        assert [d.id for d in docs] == ["1", "3"] and report.read == 2
        assert [s.split(": ")[0] for s in report.skipped] == [f"{p}:2", f"{p}:3", f"{p}:4"]
        assert "malformed JSON" in report.skipped[0] and "no 'id' or '_id'" in report.skipped[2]

    def test_an_empty_file_is_skipped_with_a_report(self, tmp_path):
        p = tmp_path / "empty.jsonl"
        p.write_text("\n  \n")
        docs, report = read(p)
        assert docs == [] and report.skipped == [f"{p}: empty file"]

    def test_a_non_utf8_file_is_skipped_with_a_report(self, tmp_path):
        p = tmp_path / "latin1.jsonl"
        p.write_bytes('{"id": "1", "text": "café"}\n'.encode("latin-1"))
        docs, report = read(p)
        assert docs == [] and "not UTF-8" in report.skipped[0]

    def test_a_document_with_no_title_and_no_text_is_skipped(self, tmp_path):
        p = write_jsonl(tmp_path / "d.jsonl", [{"id": "1", "title": "", "text": "  "}, {"id": "2", "title": "only a title"}])
        docs, report = read(p)
        assert [d.id for d in docs] == ["2"] and "document 1 has no title or text" in report.skipped[0]

    def test_a_wrong_metadata_type_names_file_line_field_and_fix(self, tmp_path):
        p = write_jsonl(tmp_path / "d.jsonl", [{"id": "1", "text": "x"}, {"id": "2", "text": "x", "year": "2024"}])
        with pytest.raises(IngestError, match=rf"{p}:2: field 'year' is int; got str '2024'; expected int: fix the value or declare the field as str"):
            read(p)


class TestCsv:
    def test_cells_are_converted_to_the_declared_types(self, tmp_path):
        p = tmp_path / "d.csv"
        p.write_text('id,title,text,year,score,draft,tags\n1,One,"first, with comma",2024,0.5,true,"[""a"", ""b""]"\n2,,second,,,,\n')
        docs, report = read(p)
        assert docs[0].metadata == {"year": 2024, "score": 0.5, "draft": True, "tags": ["a", "b"]}
        assert docs[0].text == "first, with comma" and docs[1].metadata == {} and report.read == 2

    def test_a_cell_that_is_not_the_declared_type_names_file_line_and_fix(self, tmp_path):
        p = tmp_path / "d.csv"
        p.write_text("id,text,year\n1,x,2024\n2,y,soon\n")
        with pytest.raises(IngestError, match=rf"{p}:3: field 'year' is int; got 'soon'"):
            read(p)

    def test_a_list_cell_that_is_not_a_json_array_says_how_to_write_it(self, tmp_path):
        p = tmp_path / "d.csv"
        p.write_text("id,text,tags\n1,x,a;b\n")
        with pytest.raises(IngestError, match=r'as a JSON array like \["a", "b"\]'):
            read(p)


class TestParquet:
    def test_rows_become_documents(self, tmp_path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        p = tmp_path / "d.parquet"
        pq.write_table(pa.table({"id": ["1", "2"], "text": ["a", "b"], "year": [2020, None], "tags": [["x"], []]}), p)
        docs, report = read(p)
        assert [(d.id, d.metadata) for d in docs] == [("1", {"year": 2020, "tags": ["x"]}), ("2", {"tags": []})]

    def test_a_file_that_is_not_parquet_is_skipped(self, tmp_path):
        p = tmp_path / "d.parquet"
        p.write_text("not parquet")
        docs, report = read(p)
        assert docs == [] and "not a Parquet file" in report.skipped[0]


class TestFolder:
    def test_text_and_markdown_files_are_read_recursively(self, tmp_path):
        (tmp_path / "sub").mkdir()
        (tmp_path / "a.txt").write_text("plain text")
        (tmp_path / "sub" / "b.md").write_text("intro\n# The Title\nbody")
        (tmp_path / "sub" / "c.md").write_text("no heading")
        (tmp_path / "skip.bin").write_bytes(b"\x00\x01")
        (tmp_path / "empty.txt").write_text("")
        docs, report = read(tmp_path)
        assert [(d.id, d.title) for d in docs] == [("a.txt", "a"), ("sub/b.md", "The Title"), ("sub/c.md", "c")]
        assert docs[1].text == "intro\n# The Title\nbody" and report.skipped == [f"{tmp_path / 'empty.txt'}: empty file"]


class TestBeir:
    def test_scifact_reads_every_document(self, shared_data):
        docs, report = read(shared_data / "scifact")
        assert len(docs) == report.read == 5183 and report.skipped == []
        assert all(d.id and d.text for d in docs)

    def test_cranfield_skips_its_two_empty_documents_with_a_report(self, shared_data):
        docs, report = read(shared_data / "cranfield", "beir")
        assert len(docs) == 1398 and len(report.skipped) == 2
        assert {"471", "995"} == {s.split("document ")[1].split()[0] for s in report.skipped}

    def test_a_folder_without_a_corpus_is_an_error(self, tmp_path):
        with pytest.raises(IngestError, match="has no corpus.jsonl"):
            read(tmp_path, "beir")


class TestPydocTopics:
    def test_the_standard_library_topics_are_read_without_a_path(self):
        docs, report = read(None, "pydoc-topics")
        assert len(docs) >= 70 and report.read == len(docs)
        by_id = {d.id: d for d in docs}
        assert by_id["assignment"].title == "assignment" and "Assignment statements" in by_id["assignment"].text


class TestReadSource:
    @pytest.mark.parametrize("name, reader", [("a.jsonl", "jsonl"), ("a.JSONL.gz", "jsonl"), ("a.csv", "csv"), ("a.parquet", "parquet")])
    def test_the_reader_is_inferred_from_the_suffix(self, tmp_path, name, reader):
        assert infer_reader(tmp_path / name) == reader

    def test_a_folder_with_a_corpus_is_beir_and_any_other_folder_is_a_folder(self, tmp_path, shared_data):
        assert infer_reader(shared_data / "scifact") == "beir" and infer_reader(tmp_path) == "folder"

    def test_a_missing_path_says_how_to_give_one(self, tmp_path):
        with pytest.raises(IngestError, match=rf"source not found: {tmp_path / 'nope.jsonl'}; pass --source or set source: in the pipeline"):
            read(tmp_path / "nope.jsonl")

    def test_an_unknown_suffix_asks_for_a_reader(self, tmp_path):
        (tmp_path / "a.xml").write_text("<a/>")
        with pytest.raises(IngestError, match="cannot tell the format.*--reader"):
            read(tmp_path / "a.xml")

    def test_an_unknown_reader_lists_the_known_ones(self):
        with pytest.raises(UnknownNameError, match="unknown reader 'xml'; installed: beir, csv, folder, jsonl, parquet, pydoc-topics"):
            read(None, "xml")

    def test_every_reader_is_registered(self):
        assert reader_registry.names() == ["beir", "csv", "folder", "jsonl", "parquet", "pydoc-topics"]


class TestDedupe:
    def test_the_last_occurrence_of_an_id_wins_and_is_reported(self, tmp_path):
        p = write_jsonl(tmp_path / "d.jsonl", [{"id": "1", "text": "old"}, {"id": "2", "text": "b"}, {"id": "1", "text": "new"}, {"id": "1", "text": "newest"}])
        report = IngestReport()
        docs = dedupe(read_source(str(p), None, {}, report), report)
        assert [(d.id, d.text) for d in docs] == [("1", "newest"), ("2", "b")]
        assert report.duplicates == ["1"] and report.read == 4


class TestBadInputIsSkippedAloneAndReported:
    """Reliability probes (issue 18): one bad line, file or link costs only itself, and says so."""

    def test_a_non_utf8_line_is_skipped_alone_with_file_line_and_byte_offset(self, tmp_path):
        p = tmp_path / "docs.jsonl"
        good = b'{"id": "1", "text": "ok"}\n'
        p.write_bytes(good + b'{"id": "2", "text": "caf\xe9"}\n' + b'{"id": "3", "text": "also ok"}\n')
        docs, report = read(p)
        assert [d.id for d in docs] == ["1", "3"]
        bad_at = p.read_bytes().index(b"\xe9")
        assert report.skipped == [f"{p}:2: not UTF-8 (byte offset {bad_at}); re-encode the line as UTF-8"]

    @pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c"])
    def test_records_holding_unicode_line_separators_are_kept_and_line_numbers_do_not_shift(self, tmp_path, sep):
        p = tmp_path / "docs.jsonl"
        p.write_text(json.dumps({"id": "1", "text": f"a{sep}b"}, ensure_ascii=False) + "\n{bad\n" + '{"id": "3", "text": "c"}\n', encoding="utf-8")
        docs, report = read(p)
        assert [(d.id, d.text) for d in docs] == [("1", f"a{sep}b"), ("3", "c")]
        assert [d.origin for d in docs] == [f"{p}:1", f"{p}:3"] and report.skipped[0].startswith(f"{p}:2: malformed JSON")

    def test_crlf_lines_and_a_byte_order_mark_are_read(self, tmp_path):
        p = tmp_path / "docs.jsonl"
        p.write_bytes(b'\xef\xbb\xbf{"id": "1", "text": "a"}\r\n{"id": "2", "text": "b"}\r\n')
        assert [d.id for d in read(p)[0]] == ["1", "2"]

    @pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
    def test_nan_and_infinity_literals_are_refused_per_line(self, tmp_path, literal):
        p = tmp_path / "docs.jsonl"
        p.write_text(f'{{"id": "1", "text": "a", "score": {literal}}}\n{{"id": "2", "text": "b"}}\n')
        docs, report = read(p)
        assert [d.id for d in docs] == ["2"] and report.skipped == [f"{p}:1: malformed JSON: {literal} is not JSON; write null or a number"]

    def test_a_lone_surrogate_escape_is_skipped_with_its_line(self, tmp_path):
        p = tmp_path / "docs.jsonl"
        p.write_text('{"id": "1", "text": "a\\ud800b"}\n{"id": "2", "text": "\\ud83d\\ude00"}\n')
        docs, report = read(p)
        assert [(d.id, d.text) for d in docs] == [("2", "\U0001F600")]
        assert report.skipped[0].startswith(f"{p}:1: lone surrogate U+D800")

    @pytest.mark.parametrize("bad_id, shown", [({"a": 1}, 'id {"a": 1} is a dict'), ([1], "id [1] is a list"), (True, "id true is a bool"), (1.5, "id 1.5 is a float")])
    def test_an_id_that_is_not_a_string_or_integer_is_skipped_with_file_line_and_reason(self, tmp_path, bad_id, shown):
        p = write_jsonl(tmp_path / "d.jsonl", [{"id": bad_id, "text": "x"}, {"id": "2", "text": "y"}])
        docs, report = read(p)
        assert [d.id for d in docs] == ["2"]
        assert report.skipped == [f"{p}:1: {shown}; an id must be a string or an integer"]

    def test_an_int_id_and_a_string_id_that_collide_are_reported_naming_both_lines(self, tmp_path):
        p = write_jsonl(tmp_path / "d.jsonl", [{"id": 1, "text": "int"}, {"id": "2", "text": "b"}, {"id": "1", "text": "str"}])
        report = IngestReport()
        docs = dedupe(read_source(str(p), None, {}, report), report)
        assert [(d.id, d.text) for d in docs] == [("1", "str"), ("2", "b")] and report.duplicates == ["1"]
        assert report.id_clashes == [f"id '1' at {p}:3 (str) and at {p}:1 (int) are the same id once stored as text; the last one is kept"]

    def test_an_integer_id_too_long_to_write_is_skipped(self, tmp_path):
        p = tmp_path / "d.jsonl"
        p.write_text('{"id": "1", "text": "a"}\n{"id": ' + "9" * 5000 + ', "text": "b"}\n')
        docs, report = read(p)
        assert [d.id for d in docs] == ["1"] and report.skipped[0].startswith(f"{p}:2: malformed JSON: Exceeds the limit")

    def test_deeply_nested_json_is_one_skipped_line(self, tmp_path):
        p = tmp_path / "d.jsonl"
        p.write_text("[" * 100000 + "]" * 100000 + '\n{"id": "1", "text": "a"}\n')
        docs, report = read(p)
        assert [d.id for d in docs] == ["1"] and report.skipped == [f"{p}:1: malformed JSON: nested too deeply"]

    @pytest.mark.parametrize("name, content, reason", [
        ("empty.jsonl", b"", "empty file"),
        ("blank.csv", b"\n \n", "empty file"),
        ("image.jsonl", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file (NUL byte at offset 8), not text; point the source at a text file"),
        ("corrupt.jsonl.gz", b"\x1f\x8b\x08\x00garbage", "not a valid gzip file ("),
        ("plain.jsonl.gz", b'{"id": "1"}\n', "not a valid gzip file ("),
        ("fake.parquet", b"PAR1 not really", "not a Parquet file"),
    ])
    def test_an_empty_binary_or_corrupt_file_is_skipped_with_its_reason(self, tmp_path, name, content, reason):
        p = tmp_path / name
        p.write_bytes(content)
        docs, report = read(p)
        assert docs == [] and len(report.skipped) == 1 and report.skipped[0].startswith(f"{p}: {reason}")

    def test_a_csv_row_that_is_not_utf8_is_skipped_alone(self, tmp_path):
        p = tmp_path / "d.csv"
        p.write_bytes(b"id,text\n1,good\n2,caf\xe9\n3,\"multi\nline\"\n")
        docs, report = read(p)
        assert [(d.id, d.text) for d in docs] == [("1", "good"), ("3", "multi\nline")]
        assert report.skipped == [f"{p}:3: not UTF-8; re-encode the row as UTF-8"]

    def test_a_csv_nan_in_a_float_field_names_file_line_and_fix(self, tmp_path):
        p = tmp_path / "d.csv"
        p.write_text("id,text,score\n1,x,nan\n")
        with pytest.raises(IngestError, match=rf"{p}:2: field 'score' is float; got 'nan'"):
            read(p)

    def test_a_folder_link_that_leaves_the_root_is_refused_with_a_reason(self, tmp_path):
        root, outside = tmp_path / "docs", tmp_path / "private"
        root.mkdir(), outside.mkdir()
        (outside / "secret.txt").write_text("the secret")
        (root / "a.txt").write_text("public")
        (root / "secret.txt").symlink_to(outside / "secret.txt")
        (root / "inner.txt").symlink_to(root / "a.txt")  # a link that stays inside is fine: the same bytes, read once
        (root / "sub").symlink_to(outside, target_is_directory=True)
        docs, report = read(root)
        assert [d.id for d in docs] == ["a.txt"] and report.same_content == ["inner.txt = a.txt"]
        assert report.skipped == [f"{root / 'secret.txt'}: links to {outside / 'secret.txt'}, outside the source folder {root}; copy the file into the folder to index it"]
        assert all("the secret" not in d.text for d in docs)

    def test_a_folder_with_no_text_files_says_so(self, tmp_path):
        (tmp_path / "x.bin").write_bytes(b"\x00")
        docs, report = read(tmp_path, "folder")
        assert docs == [] and report.skipped == [f"{tmp_path}: no file below it of a kind the folder reader reads (.txt .md .markdown .rst .html .htm .pdf)"]
        assert report.unread == {".bin": ["x.bin"]}
