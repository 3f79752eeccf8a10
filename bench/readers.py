"""The folder reader's libraries, compared on real files of this machine: HTML, PDF and reStructuredText.

    pip install selectolax trafilatura lxml_html_clean pypdf   # the alternatives; pypdfium2 and docutils are ragcost's
    python -m bench.readers [--html DIR] [--pdf FILE ...] [--rst DIR] [--n 200] > bench/out/readers.json

HTML: rustup's bundled Rust books (mdBook pages: a sidebar of every chapter, a header, the chapter in
<main>), by default. Per extractor: pages a second, the words kept, and the share of output lines that
recur on half the pages or more (navigation, menus: site-wide boilerplate; lower is better). No page
has a human-marked main text here, so the words kept are compared with trafilatura's, a boilerplate
remover, as a reference, not a truth.
PDF: Debian's PDFs under /usr/share/doc: seconds a page and the agreement of the two libraries' words.
reST: CMake's help pages: seconds a file with docutils, and markup left in the text (directive lines,
double backquotes, roles) against the raw file's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

RUST = Path.home() / ".rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html"


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _html_extractors() -> dict:
    from ragcost.ingest.formats import read_html

    out = {"ragcost (html.parser)": lambda p, raw: read_html(p, raw)[0].text}
    try:
        from selectolax.lexbor import LexborHTMLParser as Lexbor

        def sel(p, raw):
            tree = Lexbor(raw)
            for node in tree.css("script, style, nav, header, footer, aside, form, noscript, template, svg"):
                node.decompose()
            root = tree.css_first("main") or tree.css_first("article") or tree.body
            return root.text(separator="\n") if root is not None else ""

        out["selectolax (main, else body)"] = sel
    except ImportError:
        pass
    try:
        import trafilatura

        out["trafilatura"] = lambda p, raw: trafilatura.extract(raw.decode("utf-8", "replace"), include_comments=False) or ""
    except ImportError:
        pass
    return out


def bench_html(root: Path, n: int) -> dict:
    pages = sorted(root.glob("*.html"))  # the chapters, not the old editions' stub pages in its subfolders
    pages = [p for p in pages if p.stat().st_size > 4000][: n]
    raws = [(p, p.read_bytes()) for p in pages]
    res = {}
    texts_by = {}
    for name, fn in _html_extractors().items():
        t0 = time.perf_counter()
        texts = [fn(p, raw) for p, raw in raws]
        dt = time.perf_counter() - t0
        texts_by[name] = texts
        lines = [{ln.strip() for ln in t.splitlines() if len(ln.strip()) > 3} for t in texts]
        freq = Counter(ln for s in lines for ln in s)
        common = {ln for ln, c in freq.items() if c >= len(texts) / 2}
        total = sum(len(s) for s in lines)
        res[name] = {"pages_per_s": round(len(raws) / dt, 1), "words": sum(len(_words(t)) for t in texts),
                     "boilerplate_line_share": round(sum(len(s & common) for s in lines) / max(total, 1), 4)}
    ref = texts_by.get("trafilatura")
    if ref is not None:
        for name, texts in texts_by.items():
            rec = []
            for a, b in zip(texts, ref):
                wa, wb = Counter(_words(a)), Counter(_words(b))
                rec.append(sum((wa & wb).values()) / max(sum(wb.values()), 1))
            res[name]["trafilatura_words_kept"] = round(sorted(rec)[len(rec) // 2], 4)
    return {"pages": len(raws), "folder": str(root), "extractors": res}


def bench_pdf(files: list[Path]) -> dict:
    from ragcost.ingest.formats import read_pdf

    out = {}
    for f in files:
        raw = f.read_bytes()
        t0 = time.perf_counter()
        parts = read_pdf(f, raw)
        dt = time.perf_counter() - t0
        a = " ".join(p.text for p in parts)
        row = {"pypdfium2 (ragcost)": {"pages_with_text": len(parts), "s_per_page": round(dt / max(len(parts), 1), 4),
                                       "words": len(_words(a))}}
        try:
            import io

            from pypdf import PdfReader

            t0 = time.perf_counter()
            pages = PdfReader(io.BytesIO(raw)).pages
            b = " ".join(p.extract_text() or "" for p in pages)
            dt = time.perf_counter() - t0
            row["pypdf"] = {"pages": len(pages), "s_per_page": round(dt / max(len(pages), 1), 4), "words": len(_words(b))}
            wa, wb = Counter(_words(a)), Counter(_words(b))
            row["word_agreement"] = round(sum((wa & wb).values()) / max(sum((wa | wb).values()), 1), 4)
        except ImportError:
            pass
        out[str(f)] = row
    return out


_MARKUP = re.compile(r"^\s*\.\. |``|:[a-z]+:`|^\s*[=\-~^]{4,}\s*$", re.M)


def bench_rst(root: Path, n: int) -> dict:
    from ragcost.ingest.formats import FormatError, read_rst

    files = sorted(root.rglob("*.rst"))[:n]
    t0 = time.perf_counter()
    texts, failed = [], 0
    for f in files:
        try:
            texts.append(read_rst(f, f.read_bytes())[0].text)
        except FormatError:
            failed += 1
    dt = time.perf_counter() - t0
    raw = [f.read_text("utf-8", "replace") for f in files]
    return {"files": len(files), "folder": str(root), "failed": failed, "s_per_file": round(dt / max(len(files), 1), 4),
            "markup_marks_docutils": sum(len(_MARKUP.findall(t)) for t in texts),
            "markup_marks_raw": sum(len(_MARKUP.findall(t)) for t in raw)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--html", type=Path, default=RUST / "book")
    ap.add_argument("--pdf", type=Path, nargs="*", default=sorted(Path("/usr/share/doc").rglob("*.pdf")))
    ap.add_argument("--rst", type=Path, default=Path("/usr/share/cmake-3.25/Help/module"))
    ap.add_argument("--n", type=int, default=200)
    a = ap.parse_args(argv)
    out = {"html": bench_html(a.html, a.n) if a.html.is_dir() else None,
           "pdf": bench_pdf(a.pdf) if a.pdf else None,
           "rst": bench_rst(a.rst, a.n) if a.rst.is_dir() else None}
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
