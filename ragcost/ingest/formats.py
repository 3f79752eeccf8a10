"""What a folder's files hold, by kind: title, text and metadata of Markdown, reStructuredText, HTML and PDF.

One function per kind, ``(path, raw bytes) -> list[Part]``; a PDF gives one part per page (its page number
in the part's metadata as ``page``), every other kind one. Metadata a file declares about itself (Markdown
front matter, an HTML page's ``<meta name=... content=...>``, a PDF's document title) comes back raw; the
folder reader keeps the fields the pipeline declares and names the others once.

The libraries were chosen by measurement (``python -m bench.readers``, docs/tasks/pipelines.md#reading-a-folder):
the standard library's ``html.parser`` for HTML, docutils for reStructuredText, PDFium (pypdfium2) for PDF.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable

MARKDOWN = (".md", ".markdown")
HTML = (".html", ".htm")
RST = (".rst",)
PDF = (".pdf",)
TEXT = (".txt",)
SUFFIXES = TEXT + MARKDOWN + RST + HTML + PDF


@dataclass
class Part:
    """One document a file gives: a suffix to its id ("" or "#page=N"), its title, text and raw metadata."""

    id_suffix: str
    title: str
    text: str
    meta: dict[str, Any] = field(default_factory=dict)


class FormatError(ValueError):
    """A file of a known kind that cannot be read (a broken PDF, front matter that is not YAML)."""


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FormatError(f"not UTF-8 ({e.reason} at byte {e.start}); save it as UTF-8") from None


# -- Markdown: front matter, then the text ----------------------------------------------------------

_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)


def front_matter(text: str) -> tuple[dict[str, Any], str]:
    """(the YAML front matter's mapping, the text after it); ({}, text) when the text has none."""
    m = _FRONT.match(text)
    if not m:
        return {}, text
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        data = YAML(typ="safe", pure=True).load(m.group(1))
    except (MarkedYAMLError, YAMLError, ValueError) as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        raise FormatError(f"front matter is not YAML{where} ({getattr(e, 'problem', None) or e}); fix it or remove "
                          "the --- block") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FormatError(f"front matter is a {type(data).__name__}, not a mapping of fields; write `field: value` lines")
    return {str(k): v for k, v in data.items()}, text[m.end():]


def read_markdown(path: Path, raw: bytes) -> list[Part]:
    meta, body = front_matter(_decode(raw))
    title = meta.pop("title", None)
    if not isinstance(title, str) or not title.strip():
        title = next((ln[2:].strip() for ln in body.splitlines() if ln.startswith("# ")), "")
    return [Part("", title, body, meta)]


def read_text(path: Path, raw: bytes) -> list[Part]:
    return [Part("", "", _decode(raw))]


# -- reStructuredText: docutils' document tree as text, nothing included from outside the file ----------

def read_rst(path: Path, raw: bytes) -> list[Part]:
    """Title: the document's title (its first section title); text: the tree's text, markup gone. Directives
    that would read other files or raw output (``include``, ``raw``) are off, and docutils' own messages
    about the file's markup are not printed: a file with broken markup still gives its text."""
    from docutils.core import publish_doctree
    from docutils.utils import SystemMessage

    text = _decode(raw)
    settings = {"report_level": 5, "halt_level": 5, "file_insertion_enabled": False, "raw_enabled": False,
                "input_encoding": "unicode", "warning_stream": False, "doctitle_xform": True, "docinfo_xform": True}
    try:
        tree = publish_doctree(text, source_path=str(path), settings_overrides=settings)
    except (SystemMessage, ValueError, AttributeError, TypeError, IndexError) as e:  # docutils on broken input
        raise FormatError(f"reStructuredText docutils cannot parse ({type(e).__name__}: {e})") from None
    from docutils import nodes

    title = ""
    for t in tree.findall(nodes.title):
        title = t.astext().strip()
        break
    meta: dict[str, Any] = {}
    for info in list(tree.findall(nodes.docinfo)):  # :field: value lines at the top (docinfo), as front matter
        for f in info.children:
            if isinstance(f, nodes.field) and len(f.children) == 2:
                meta[f.children[0].astext().strip().lower()] = f.children[1].astext().strip()
            elif isinstance(f, nodes.Element) and f.tagname not in ("field",):
                meta[f.tagname] = f.astext().strip()
        info.parent.remove(info)
    for msg in list(tree.findall(nodes.system_message)):
        msg.parent.remove(msg)
    # a role docutils does not know (Sphinx's :ref:, :class:, CMake's :command:) stays as its source: keep its text
    text = _ROLE.sub(lambda m: re.sub(r"\s*<[^<>]*>$", "", m.group(1)).lstrip("~!") or m.group(1), tree.astext())
    return [Part("", title, text.strip(), meta)]


_ROLE = re.compile(r":[A-Za-z][\w.+-]*(?::[\w.+-]+)*:`([^`]+)`")


# -- HTML: the main text, the page's title --------------------------------------------------------

_SKIP = {"script", "style", "noscript", "template", "svg", "nav", "header", "footer", "aside", "form", "head",
         "button", "select", "iframe", "object"}
_BLOCK = {"p", "div", "section", "article", "main", "li", "ul", "ol", "dl", "dt", "dd", "table", "tr", "br", "hr",
          "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "figure", "figcaption", "td", "th"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}


class _Html(HTMLParser):
    """Text of the page by region: all of <body>, and the <main> (or else <article>) parts; what is never
    content (scripts, styles, navigation, header, footer, asides, forms) is dropped everywhere."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.skip = 0
        self.title: list[str] = []
        self.h1: list[str] = []
        self.body: list[str] = []
        self.main: list[str] = []
        self.article: list[str] = []
        self.meta: dict[str, str] = {}
        self.in_title = self.in_h1 = self.in_main = self.in_article = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "meta":
            a = {k.lower(): (v or "") for k, v in attrs}
            name = a.get("name") or a.get("property")
            if name and "content" in a:
                self.meta.setdefault(name.strip().lower(), a["content"].strip())
            return
        if tag in _VOID:
            if tag in ("br", "hr"):
                self._add("\n")
            return
        if tag == "title" and self.skip:  # an <svg>'s own <title> is not the page's
            tag = "title (not the page's)"
        self.stack.append(tag)
        if tag in _SKIP and tag != "head":
            self.skip += 1
        if tag == "title":
            self.in_title += 1
        elif tag == "h1":
            self.in_h1 += 1
        elif tag == "main":
            self.in_main += 1
        elif tag == "article":
            self.in_article += 1
        if tag in _BLOCK:
            self._add("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID or tag not in self.stack:
            return
        while self.stack:  # close what the page left open inside it
            top = self.stack.pop()
            if top in _SKIP and top != "head":
                self.skip -= 1
            if top == "title":
                self.in_title -= 1
            elif top == "h1":
                self.in_h1 -= 1
            elif top == "main":
                self.in_main -= 1
            elif top == "article":
                self.in_article -= 1
            if top in _BLOCK:
                self._add("\n")
            if top == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
            return
        if self.skip:
            return
        if self.in_h1:
            self.h1.append(data)
        self._add(data)

    def _add(self, s: str) -> None:
        if self.skip:
            return
        self.body.append(s)
        if self.in_main:
            self.main.append(s)
        if self.in_article:
            self.article.append(s)


def _tidy(parts: list[str]) -> str:
    text = "".join(parts).replace("\xa0", " ")
    lines = [re.sub(r"[ \t\r\f\v]+", " ", ln).strip() for ln in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def read_html(path: Path, raw: bytes) -> list[Part]:
    """Title: <title>, else the first <h1>; text: <main>, else <article>, else <body>, less what is never content;
    metadata: the page's <meta name|property=... content=...>."""
    text = _decode(raw)
    p = _Html()
    try:
        p.feed(text)
        p.close()
    except AssertionError as e:  # html.parser on a malformed declaration
        raise FormatError(f"HTML cannot be parsed ({e})") from None
    main = _tidy(p.main) or _tidy(p.article)
    title = _tidy(p.title) or _tidy(p.h1)
    return [Part("", title, main or _tidy(p.body), dict(p.meta))]


# -- PDF: text per page ----------------------------------------------------------------------------

def read_pdf(path: Path, raw: bytes) -> list[Part]:
    """One part per page with text (``#page=N``, N from 1, ``page`` in its metadata); the title is the document's
    /Title where it has one. A page without text (a scan) is left out; a PDF without any is one FormatError.
    PDFium (pypdfium2): the same words as pypdf on Debian's PDFs 6-13x faster (bench.readers)."""
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(raw)
    except pdfium.PdfiumError as e:
        why = str(e)
        if "password" in why.lower():
            raise FormatError("the PDF is encrypted; save a copy without a password to index it") from None
        raise FormatError(f"the PDF cannot be read ({why})") from None
    try:
        title = str(doc.get_metadata_dict().get("Title") or "").strip()
        parts = []
        for n in range(len(doc)):
            page = doc[n]
            try:
                tp = page.get_textpage()
                try:
                    text = tp.get_text_range().replace("\r\n", "\n").replace("\r", "\n").strip()
                finally:
                    tp.close()
            finally:
                page.close()
            if text:
                parts.append(Part(f"#page={n + 1}", title, text, {"page": n + 1}))
    except pdfium.PdfiumError as e:
        raise FormatError(f"the PDF cannot be read ({e})") from None
    finally:
        doc.close()
    if not parts:
        raise FormatError("no text on any of its pages (a scan?); run OCR on it first")
    return parts


EXTRACTORS: dict[str, Callable[[Path, bytes], list[Part]]] = {
    **{s: read_text for s in TEXT}, **{s: read_markdown for s in MARKDOWN}, **{s: read_rst for s in RST},
    **{s: read_html for s in HTML}, **{s: read_pdf for s in PDF},
}
