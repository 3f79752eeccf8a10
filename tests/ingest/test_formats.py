"""A folder of mixed kinds: HTML (main text, title), PDF (text per page, page as metadata), reST, Markdown front
matter into declared fields, files of other kinds named, byte-identical copies read once. The PDFs are written
here, by hand, as PDF 1.4 (one Helvetica text line a page)."""

from __future__ import annotations

import json

import pytest

from ragcost.config.fields import parse_fields
from ragcost.ingest.base import IngestReport
from ragcost.ingest.formats import FormatError, front_matter, read_html, read_pdf, read_rst
from ragcost.ingest.readers import read_source


def make_pdf(pages: list[str], title: str = "") -> bytes:
    """A valid PDF whose page i shows pages[i] in Helvetica (no compression; offsets in the xref are exact)."""
    def esc(t: str) -> str:
        return t.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    n = len(pages)
    objs = ["<< /Type /Catalog /Pages 2 0 R >>",
            "<< /Type /Pages /Kids [" + " ".join(f"{4 + 2 * i} 0 R" for i in range(n)) + f"] /Count {n} >>",
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({esc(text)}) Tj ET"
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                    f"/Contents {5 + 2 * i} 0 R >>")
        objs.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    info = len(objs) + 1
    objs.append(f"<< /Title ({esc(title)}) >>")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for k, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{k} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R /Info {info} 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


HTML_PAGE = """<!doctype html><html><head><title>Refund policy</title>
<meta name="team" content="billing"><meta name="year" content="2024"><style>p { color: red }</style>
<script>var secret = "do not index";</script></head>
<body><nav><a href="/">Home</a> <a href="/pricing">Pricing</a></nav><header>Acme Support</header>
<main><h1>Refunds</h1><p>Refunds are issued within&nbsp;14 days of a request.</p><ul><li>card</li><li>wire</li></ul></main>
<footer>Copyright Acme</footer></body></html>"""

RST_PAGE = """Webhook signatures
==================

:team: platform
:year: 2023

Every webhook carries a ``X-Signature`` header; see :ref:`keys`.

.. note:: Rotate the secret yearly.

.. include:: /etc/hostname
"""

MD_PAGE = """---
title: Resetting a password
team: identity
year: 2025
author: kim
---
# Ignored heading

Use the reset link; it expires after one hour.
"""


@pytest.fixture
def mixed(tmp_path):
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "refunds.html").write_text(HTML_PAGE)
    (root / "webhooks.rst").write_text(RST_PAGE)
    (root / "password.md").write_text(MD_PAGE)
    (root / "sub" / "password-copy.md").write_text(MD_PAGE)  # byte-identical
    (root / "plain.txt").write_text("Invoices are emailed monthly.")
    (root / "manual.pdf").write_bytes(make_pdf(["Exporting data as CSV from the dashboard.",
                                                "Deleting an account removes every export."], title="Admin manual"))
    (root / "contract.docx").write_bytes(b"PK\x03\x04 not read")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n")
    (root / "sub" / "diagram.png").write_bytes(b"\x89PNG\r\n x")
    (root / ".git" / "objects").mkdir(parents=True)  # a checkout's own files are not named as unread
    (root / ".git" / "objects" / "ab12").write_bytes(b"x")
    (root / ".DS_Store").write_bytes(b"x")
    return root


FIELDS = parse_fields({"team": "str", "year": "int", "page": "int"})


def _read(root, fields=FIELDS, duplicates="once"):
    report = IngestReport()
    docs = list(read_source(str(root), None, fields, report, duplicates))
    return {d.id: d for d in docs}, report


class TestKinds:
    def test_html_main_text_and_title_without_navigation_scripts_or_footer(self):
        (part,) = read_html(None, HTML_PAGE.encode())
        assert part.title == "Refund policy"
        assert part.text == "Refunds\n\nRefunds are issued within 14 days of a request.\n\ncard\n\nwire"
        assert part.meta == {"team": "billing", "year": "2024"}

    def test_an_svg_title_is_not_the_pages(self):
        (part,) = read_html(None, b"<html><body><svg><title>icon</title></svg><h1>Real</h1><p>x</p></body></html>")
        assert part.title == "Real" and "icon" not in part.text

    def test_html_without_main_falls_back_to_article_then_body(self):
        (part,) = read_html(None, b"<html><body><nav>menu</nav><h1>Only heading</h1><p>body text</p></body></html>")
        assert part.title == "Only heading" and part.text == "Only heading\n\nbody text"

    def test_rst_text_has_no_markup_and_reads_no_other_file(self):
        (part,) = read_rst("w.rst", RST_PAGE.encode())
        assert part.title == "Webhook signatures" and part.meta == {"team": "platform", "year": "2023"}
        assert "X-Signature" in part.text and "``" not in part.text and ":ref:" not in part.text
        assert "Rotate the secret yearly." in part.text
        assert open("/etc/hostname").read().strip() not in part.text.split()

    def test_pdf_text_per_page_with_the_page_number_and_the_documents_title(self):
        parts = read_pdf(None, make_pdf(["first page words", "second page words"], title="T"))
        assert [(p.id_suffix, p.title, p.text, p.meta) for p in parts] == [
            ("#page=1", "T", "first page words", {"page": 1}), ("#page=2", "T", "second page words", {"page": 2})]

    def test_broken_inputs_are_one_format_error_each(self):
        with pytest.raises(FormatError, match="the PDF cannot be read"):
            read_pdf(None, b"%PDF-1.4\n garbage")
        with pytest.raises(FormatError, match="front matter is not YAML at line"):
            front_matter("---\ntitle: [unclosed\n---\nbody")
        with pytest.raises(FormatError, match="front matter is a list, not a mapping"):
            front_matter("---\n- a\n- b\n---\nbody")
        with pytest.raises(FormatError, match="not UTF-8"):
            read_html(None, b"<p>caf\xe9</p>")


class TestMixedFolder:
    def test_every_kind_is_read_and_what_is_not_is_named(self, mixed):
        docs, report = _read(mixed)
        assert sorted(docs) == ["manual.pdf#page=1", "manual.pdf#page=2", "password.md", "plain.txt", "refunds.html",
                                "webhooks.rst"]
        assert docs["password.md"].title == "Resetting a password" and docs["password.md"].text.startswith("# Ignored")
        assert docs["password.md"].metadata == {"team": "identity", "year": 2025}
        assert docs["refunds.html"].metadata == {"team": "billing", "year": 2024}
        assert docs["webhooks.rst"].metadata == {"team": "platform", "year": 2023}
        assert docs["manual.pdf#page=2"].metadata == {"page": 2} and docs["manual.pdf#page=2"].title == "Admin manual"
        assert report.unread == {".docx": ["contract.docx"], ".png": ["logo.png", "sub/diagram.png"]}
        assert report.same_content == ["sub/password-copy.md = password.md"]
        assert report.undeclared == {"author": 1}  # the copy was not read, so named once
        notes = report.notes()
        assert notes[0] == "not read: 3 file(s) of a kind no reader reads (2 .png, 1 .docx): contract.docx, logo.png, sub/diagram.png"
        assert notes[1].startswith("1 file(s) byte-identical to one read before, read once (source.duplicates: keep")
        assert notes[2].startswith("metadata the files declare that the pipeline does not, left out: author (1 file(s))")
        assert report.skipped == []

    def test_copies_are_kept_when_asked(self, mixed):
        docs, report = _read(mixed, duplicates="keep")
        assert "sub/password-copy.md" in docs and report.same_content == []

    def test_a_front_matter_value_of_the_wrong_type_names_the_file_and_field(self, mixed):
        from ragcost.errors import IngestError

        (mixed / "password.md").write_text(MD_PAGE.replace("year: 2025", "year: soon"))
        with pytest.raises(IngestError, match=r"password.md: field 'year' is int; got 'soon'"):
            _read(mixed)


def test_index_then_filter_on_a_front_matter_field_and_on_a_pdf_page(mixed, tmp_path, capsys):
    """Through the CLI: index the mixed folder, then query with a filter on each kind of metadata."""
    from tests.cli.conftest import run_cli, write_pipeline

    pipe = write_pipeline(tmp_path, source=str(mixed), metadata={"team": "str", "year": "int", "page": "int"})
    code, out, err = run_cli(capsys, "index", pipe, "--dry-run")  # says what it would not read, before any work
    assert code == 0, err
    assert "note: not read: 3 file(s) of a kind no reader reads (2 .png, 1 .docx)" in out and "documents: 6 read" in out
    code, out, err = run_cli(capsys, "index", pipe)
    assert code == 0, err
    assert "6 documents read" in out
    assert "note: not read: 3 file(s) of a kind no reader reads (2 .png, 1 .docx)" in out
    assert "note: 1 file(s) byte-identical to one read before, read once" in out
    code, out, err = run_cli(capsys, "query", pipe, "how do I reset my password", "--filter", '{"team": "identity"}', "--json")
    assert code == 0, err
    assert {h["doc_id"] for h in json.loads(out)["queries"][0]["hits"]} == {"password.md"}
    code, out, err = run_cli(capsys, "query", pipe, "export data", "--filter", '{"page": 2}', "--json")
    assert code == 0, err
    assert {h["doc_id"] for h in json.loads(out)["queries"][0]["hits"]} == {"manual.pdf#page=2"}
