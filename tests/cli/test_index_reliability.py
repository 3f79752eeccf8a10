"""`ragcost index` on hostile but fair sources (issue 18): bad input never costs stored documents."""

from __future__ import annotations

import json
from pathlib import Path

from ragcost.config.fields import parse_fields
from ragcost.store import SQLStore as Store
from tests.cli.conftest import DOCS, run_cli, write_corpus, write_pipeline

FIELDS = parse_fields({"tenant": "str", "year": "int", "tags": "list[str]"})


def stored_ids(folder: Path) -> list[str]:
    with Store(f"duckdb:///{folder / 'kb.duckdb'}", "kb", FIELDS).open() as s:
        return sorted(s.doc_hashes())


def stored_chunk_doc_ids(folder: Path) -> set[str]:
    import duckdb

    con = duckdb.connect(str(folder / "kb.duckdb"), read_only=True)
    try:
        tables = [t for (t,) in con.execute("select table_name from information_schema.columns where column_name = 'doc_id'").fetchall()]
        return {i for t in tables for (i,) in con.execute(f'select distinct doc_id from "{t}"').fetchall()}
    finally:
        con.close()


def corrupt_one_line(path: Path) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"Invoice", b"Invo\xefce")  # one invalid UTF-8 byte sequence on line 3
    path.write_bytes(b"\n".join(lines))


class TestPruneAfterASkippedRead:
    def test_one_bad_byte_skips_one_line_and_prune_refuses_to_delete(self, kb, capsys, tmp_path):
        assert run_cli(capsys, "index", kb)[0] == 0
        corrupt_one_line(tmp_path / "kb.jsonl")
        code, out, err = run_cli(capsys, "index", kb, "--prune")
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and err.startswith("error: refusing to prune: the source read skipped 1 input(s)")
        assert "kb.jsonl:3: not UTF-8 (byte offset" in err
        assert "--prune would delete 1 of 12 stored documents" in err and "--prune --force" in err
        assert len(stored_ids(tmp_path)) == 12  # nothing deleted

    def test_without_prune_the_bad_line_is_skipped_alone_and_reported(self, kb, capsys, tmp_path):
        corrupt_one_line(tmp_path / "kb.jsonl")
        code, out, _ = run_cli(capsys, "index", kb)
        assert code == 0 and "warning: skipped 1 input(s): " in out and "kb.jsonl:3: not UTF-8" in out
        assert "11 documents read" in out and "kb-3" not in stored_ids(tmp_path)

    def test_prune_force_deletes_what_the_source_no_longer_has(self, kb, capsys, tmp_path):
        run_cli(capsys, "index", kb)
        corrupt_one_line(tmp_path / "kb.jsonl")
        code, out, _ = run_cli(capsys, "index", kb, "--prune", "--force")
        assert code == 0 and "1 pruned" in out and "kb-3" not in stored_ids(tmp_path)

    def test_prune_after_a_clean_read_still_deletes_without_force(self, kb, capsys, tmp_path):
        run_cli(capsys, "index", kb)
        write_corpus(tmp_path / "kb.jsonl", DOCS[:-1])
        code, out, _ = run_cli(capsys, "index", kb, "--prune")
        assert code == 0 and "1 pruned" in out

    def test_force_without_prune_is_a_usage_error(self, kb, capsys):
        code, _, err = run_cli(capsys, "index", kb, "--force")
        assert code == 2 and "--force only applies with --prune" in err


class TestSkippedSourcesSayWhy:
    def test_a_source_whose_every_file_is_skipped_names_the_files_and_reasons(self, tmp_path, capsys):
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "empty.txt").write_text("")
        (tmp_path / "docs" / "blank.md").write_text("  \n")
        p = write_pipeline(tmp_path, source=str(tmp_path / "docs"), metadata={})
        code, _, err = run_cli(capsys, "index", p)
        assert code == 1 and err.count("\n") == 1 and "no chunks" not in err
        assert f"no documents read; skipped 2 input(s): {tmp_path / 'docs' / 'blank.md'}: empty file; {tmp_path / 'docs' / 'empty.txt'}: empty file" in err

    def test_a_fake_parquet_source_says_it_is_not_parquet(self, tmp_path, capsys):
        (tmp_path / "d.parquet").write_text("not parquet")
        p = write_pipeline(tmp_path, source=str(tmp_path / "d.parquet"))
        code, _, err = run_cli(capsys, "index", p)
        assert code == 1 and err.count("\n") == 1 and "d.parquet: not a Parquet file" in err

    def test_a_folder_link_leaving_the_root_is_not_indexed_and_is_reported(self, tmp_path, capsys):
        (tmp_path / "docs").mkdir()
        (tmp_path / "outside.txt").write_text("a private note that must not be indexed")
        (tmp_path / "docs" / "a.txt").write_text("a public note about refunds")
        (tmp_path / "docs" / "secret.txt").symlink_to(tmp_path / "outside.txt")
        p = write_pipeline(tmp_path, source=str(tmp_path / "docs"), metadata={})
        code, out, _ = run_cli(capsys, "index", p)
        assert code == 0 and "secret.txt: links to" in out and "outside the source folder" in out
        assert stored_ids(tmp_path) == ["a.txt"]


class TestReaderOption:
    def test_reader_names_the_format_of_a_file_with_an_unknown_suffix(self, tmp_path, capsys):
        write_corpus(tmp_path / "kb.txt")
        p = write_pipeline(tmp_path, source=str(tmp_path / "kb.txt"))
        code, _, err = run_cli(capsys, "index", p)
        assert code == 1 and "with --reader" in err
        code, out, _ = run_cli(capsys, "index", p, "--reader", "jsonl")
        assert code == 0 and "12 documents read" in out

    def test_reader_alone_names_a_source_that_needs_no_path(self, tmp_path):
        from ragcost.runtime.indexing import _source
        from ragcost.runtime.pipeline import Pipeline

        pipe = Pipeline.load(write_pipeline(tmp_path, metadata={}, source=None))
        try:
            assert _source(pipe, None, "pydoc-topics") == (None, "pydoc-topics")
            assert _source(pipe, str(tmp_path / "x.data"), "jsonl") == (str(tmp_path / "x.data"), "jsonl")
        finally:
            pipe.close()

    def test_an_unknown_reader_lists_the_known_ones(self, kb, capsys):
        code, _, err = run_cli(capsys, "index", kb, "--reader", "xml")
        assert code == 1 and "unknown reader 'xml'" in err and "jsonl" in err


class TestIds:
    def test_int_and_string_ids_that_collide_are_a_duplicate_warning_naming_both_lines(self, tmp_path, capsys):
        rows = [{"id": 7, "text": "int id"}, {"id": "7", "text": "string id"}, {"id": {"a": 1}, "text": "dict id"}]
        (tmp_path / "kb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        p = write_pipeline(tmp_path, metadata={})
        code, out, _ = run_cli(capsys, "index", p)
        assert code == 0 and "1 documents read" in out
        assert f"warning: duplicate id: id '7' at {tmp_path / 'kb.jsonl'}:2 (str) and at {tmp_path / 'kb.jsonl'}:1 (int)" in out
        assert "kb.jsonl:3: id {\"a\": 1} is a dict; an id must be a string or an integer" in out

    def test_with_redact_pii_an_email_id_never_reaches_the_store_or_the_output(self, tmp_path, capsys):
        rows = [{"id": "alice@corp.example", "text": "Refunds are possible for 30 days."},
                {"id": "bob@corp.example", "text": "Passwords are reset from the login page."},
                {"id": "kb-3", "text": "Invoices are PDF files."},
                {"id": "carol@corp.example", "text": ""}]
        (tmp_path / "kb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        p = write_pipeline(tmp_path, metadata={}, redact=["pii"])
        code, out, err = run_cli(capsys, "index", p)
        assert code == 0 and "corp.example" not in out + err
        ids = stored_ids(tmp_path)
        assert len(ids) == 3 and "kb-3" in ids and all("corp.example" not in i for i in ids)
        assert sum(i.startswith("<EMAIL>#") for i in ids) == 2
        assert stored_chunk_doc_ids(tmp_path) == set(ids)
        code, out, _ = run_cli(capsys, "query", p, "refund window", "--json")
        assert code == 0 and "corp.example" not in out and "<EMAIL>#" in out
        code, out, _ = run_cli(capsys, "index", p)  # the same keyed ids again: nothing re-embedded
        assert code == 0 and "0 embedded" in out and "3 unchanged" in out


    def test_with_redact_pii_a_bad_value_error_does_not_quote_the_personal_data(self, tmp_path, capsys):
        (tmp_path / "kb.jsonl").write_text(json.dumps({"id": "1", "text": "x", "year": "dave@corp.example"}) + "\n")
        p = write_pipeline(tmp_path, metadata={"year": "int"}, redact=["pii"])
        code, _, err = run_cli(capsys, "index", p)
        assert code == 1 and "field 'year' is int" in err and "<EMAIL>" in err and "corp.example" not in err


class TestProgress:
    def test_progress_counts_chunks_and_moves_inside_one_long_document(self, tmp_path, monkeypatch):
        from ragcost.runtime import indexing
        from ragcost.runtime.pipeline import Pipeline

        monkeypatch.setattr(indexing, "EMBED_CHUNKS", 4)
        long_text = " ".join(f"word{i} about refunds and invoices" for i in range(300))
        (tmp_path / "kb.jsonl").write_text(json.dumps({"id": "long", "text": long_text}) + "\n" + json.dumps({"id": "short", "text": "tiny"}) + "\n")
        p = write_pipeline(tmp_path, metadata={})
        seen = []
        pipe = Pipeline.load(p)
        try:
            summary = indexing.run_index(pipe, progress=lambda done, total: seen.append((done, total)))
        finally:
            pipe.close()
        total = summary.embedded_chunks
        assert total > 8 and all(t == total for _, t in seen) and seen[-1] == (total, total)
        assert len(seen) >= total // 4 and [d for d, _ in seen] == sorted(d for d, _ in seen)

    def test_write_batches_hold_at_most_32_documents_and_whole_documents(self):
        from ragcost.records import SourceDocument
        from ragcost.runtime import indexing

        class Fixed:
            def chunk_documents(self, docs):
                return [[object()] * (2000 if d.text == "long" else 1) for d in docs]

        todo = [(SourceDocument(str(i), "long" if i == 5 else "x"), "h") for i in range(70)]
        batches = indexing._chunk_batches(todo, Fixed())
        assert [d.id for part in batches for d, _, _ in part] == [str(i) for i in range(70)]
        assert all(len(part) <= 32 for part in batches)
        assert [len(part) for part in batches][:3] == [5, 1, 32]  # the long document is alone in its transaction
        assert all(len(part) == 1 or sum(len(c) for _, _, c in part) <= indexing.WRITE_CHUNKS for part in batches)
