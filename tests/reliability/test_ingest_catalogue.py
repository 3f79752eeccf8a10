"""The ingest part of the bad-input catalogue (issue 18): (source, arguments, exit code, first line).

Each probe writes its own source beside the tiny CLI pipeline and runs `ragcost index` in-process.
The first line is stderr's when the run fails, stdout's when it succeeds (warnings come first).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Callable

import pytest

from tests.cli.conftest import run_cli, write_corpus, write_pipeline

GOOD = b'{"id": "a", "text": "Refunds are possible for 30 days."}\n{"id": "b", "text": "Invoices are PDF files."}\n'


def jsonl(content: bytes, name: str = "src.jsonl") -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        (folder / name).write_bytes(content)
        return folder / name
    return make


def folder_with(files: dict[str, bytes], links: dict[str, str] = {}) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        root = folder / "docs"
        root.mkdir()
        for n, b in files.items():
            (root / n).write_bytes(b)
        for n, target in links.items():
            (root / n).symlink_to(target)
        return root
    return make


CATALOGUE = [
    # (probe, source, extra args, exit code, first line pattern)
    ("non-utf8 line", jsonl(GOOD + b'{"id": "c", "text": "caf\xe9"}\n'), [], 0, r"warning: skipped 1 input\(s\): .*src\.jsonl:3: not UTF-8 \(byte offset \d+\)"),
    ("u+2028 in a record", jsonl(GOOD + json.dumps({"id": "c", "text": "x\u2028y"}, ensure_ascii=False).encode()), [], 0, r"3 documents read: 3 embedded"),
    ("u+0085 in a record", jsonl(json.dumps({"id": "c", "text": "x\u0085y"}, ensure_ascii=False).encode() + b"\n" + GOOD), [], 0, r"3 documents read: 3 embedded"),
    ("empty file", jsonl(b""), [], 1, r"error: .*src\.jsonl: no documents read; skipped 1 input\(s\): .*src\.jsonl: empty file$"),
    ("binary file", jsonl(b"\x7fELF\x02\x01\x01\x00\x00\x00"), [], 1, r"error: .*no documents read; .*binary file \(NUL byte at offset 7\)"),
    ("corrupt gzip", jsonl(b"\x1f\x8b\x08\x00junk", "src.jsonl.gz"), [], 1, r"error: .*no documents read; .*src\.jsonl\.gz: not a valid gzip file"),
    ("truncated gzip", jsonl(gzip.compress(GOOD)[:-12], "src.jsonl.gz"), [], 1, r"error: .*no documents read; .*not a valid gzip file"),
    ("fake parquet", jsonl(b"PAR1 but not parquet", "src.parquet"), [], 1, r"error: .*no documents read; .*src\.parquet: not a Parquet file"),
    ("unknown suffix", jsonl(GOOD, "src.data"), [], 1, r"error: cannot tell the format of .*src\.data; name a reader .* with --reader"),
    ("unknown suffix with --reader", jsonl(GOOD, "src.data"), ["--reader", "jsonl"], 0, r"2 documents read: 2 embedded"),
    ("unknown --reader", jsonl(GOOD), ["--reader", "xml"], 1, r"error: unknown reader 'xml'; installed: beir, csv, folder, jsonl, parquet, pydoc-topics"),
    ("dict id", jsonl(GOOD + b'{"id": {"a": 1}, "text": "x"}\n'), [], 0, r"warning: skipped 1 input\(s\): .*src\.jsonl:3: id \{\"a\": 1\} is a dict; an id must be a string or an integer"),
    ("int and str id", jsonl(b'{"id": 1, "text": "x"}\n{"id": "1", "text": "y"}\n'), [], 0, r"warning: 1 duplicate id\(s\) in the source, the last occurrence kept: 1$"),
    ("NaN literal", jsonl(GOOD + b'{"id": "c", "text": NaN}\n'), [], 0, r"warning: skipped 1 input\(s\): .*src\.jsonl:3: malformed JSON: NaN is not JSON"),
    ("lone surrogate escape", jsonl(GOOD + b'{"id": "c", "text": "\\udc80"}\n'), [], 0, r"warning: skipped 1 input\(s\): .*src\.jsonl:3: lone surrogate U\+DC80"),
    ("huge int id", jsonl(GOOD + b'{"id": ' + b"7" * 5000 + b', "text": "x"}\n'), [], 0, r"warning: skipped 1 input\(s\): .*src\.jsonl:3: malformed JSON: Exceeds the limit"),
    ("csv row not utf-8", jsonl(b"id,text\n1,good\n2,caf\xe9\n", "src.csv"), [], 0, r"warning: skipped 1 input\(s\): .*src\.csv:3: not UTF-8"),
    ("symlink out of the folder", folder_with({"a.txt": b"public refunds note"}, {"secret.txt": "/etc/hostname"}), [], 0, r"warning: skipped 1 input\(s\): .*secret\.txt: links to /etc/hostname, outside the source folder"),
    ("empty folder", folder_with({"x.bin": b"\x00"}), [], 1, r"error: .*docs: no documents read; skipped 1 input\(s\): .*docs: no file below it of a kind the folder reader reads \(\.txt \.md .*\.pdf\)$"),
    ("broken pdf", folder_with({"a.txt": b"public refunds note", "m.pdf": b"%PDF-1.4\n garbage"}), [], 0, r"warning: skipped 1 input\(s\): .*m\.pdf: the PDF cannot be read"),
    ("not a pdf", folder_with({"a.txt": b"public refunds note", "m.pdf": b"<html>"}), [], 0, r"warning: skipped 1 input\(s\): .*m\.pdf: not a PDF \(no %PDF- header\)"),
    ("front matter not yaml", folder_with({"a.txt": b"public refunds note", "b.md": b"---\ntitle: [x\n---\nbody"}), [], 0, r"warning: skipped 1 input\(s\): .*b\.md: front matter is not YAML at line"),
    ("--force without --prune", jsonl(GOOD), ["--force"], 2, r"error: .*--force only applies with --prune"),
]


@pytest.mark.parametrize("probe, make, args, code, first", CATALOGUE, ids=[c[0] for c in CATALOGUE])
def test_ingest_probe_exits_with_its_code_and_one_clear_first_line(tmp_path, capsys, probe, make, args, code, first):
    source = make(tmp_path)
    p = write_pipeline(tmp_path, source=str(source), metadata={})
    got, out, err = run_cli(capsys, "index", p, *args)
    shown = err if got else out
    assert got == code, (probe, out, err)
    assert re.search(first, shown.splitlines()[0]), (probe, shown)
    if got:
        assert err.count("\n") == 1 and "unexpected" not in err


def test_prune_after_a_skipped_read_refuses_and_deletes_nothing(tmp_path, capsys):
    p = write_pipeline(tmp_path, metadata={})
    write_corpus(tmp_path / "kb.jsonl")
    assert run_cli(capsys, "index", p)[0] == 0
    (tmp_path / "kb.jsonl").write_bytes((tmp_path / "kb.jsonl").read_bytes() + b'{"id": "x", "text": "\xff"}\n')
    (tmp_path / "kb.jsonl").write_bytes(b"\xff" + (tmp_path / "kb.jsonl").read_bytes())  # line 1 (kb-1) unreadable too
    code, out, err = run_cli(capsys, "index", p, "--prune")
    assert code == 1 and re.fullmatch(r"error: refusing to prune: the source read skipped 2 input\(s\) \(.*\), and --prune would delete 1 of 12 stored documents; fix the source, or pass --prune --force to delete them anyway\n", err)
    code, out, _ = run_cli(capsys, "index", p)
    assert code == 0 and "11 documents read: 0 embedded" in out and "0 pruned" in out


# A metadata value its declared field refuses (issue 39): declaring the field as another type is offered only when
# that type holds the value and is not the type the field already has.
METADATA = [
    ("int too large for 64 bits", {"year": 2 ** 70}, r"field 'year' is int \(64-bit\); \d+ is outside -2\*\*63\.\.2\*\*63-1; use a float field or a smaller value$"),
    ("list mixing kinds", {"tags": ["a", 1]}, r"field 'tags' is list\[str\]; got int 1; expected list\[str\]: fix the value \(a metadata value is a string, number or boolean, or a list of one of those kinds\)$"),
    ("dict value", {"year": {"y": 1}}, r"field 'year' is int; got dict .*; expected int: fix the value \(a metadata value is"),
    ("str for an int", {"year": "2024"}, r"field 'year' is int; got str '2024'; expected int: fix the value or declare the field as str$"),
    ("ints for a list of str", {"tags": [1, 2]}, r"field 'tags' is list\[str\]; got int 1; expected list\[str\]: fix the value or declare the field as list\[int\]$"),
]


@pytest.mark.parametrize("probe, meta, line", METADATA, ids=[m[0] for m in METADATA])
def test_a_refused_metadata_value_never_suggests_the_type_its_field_has(tmp_path, capsys, probe, meta, line):
    (tmp_path / "src.jsonl").write_text(json.dumps({"id": "a", "text": "Refunds.", **meta}) + "\n", encoding="utf-8")
    p = write_pipeline(tmp_path, source=str(tmp_path / "src.jsonl"), metadata={"year": "int", "tags": "list[str]"})
    code, out, err = run_cli(capsys, "index", p)
    assert code == 1 and err.count("\n") == 1 and re.search(r"error: .*src\.jsonl:1: " + line, err), err
    assert "declare the field as int" not in err and "declare the field as list[str]" not in err
