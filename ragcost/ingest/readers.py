"""Source readers, registered by short name: jsonl, csv, parquet, folder, beir, pydoc-topics.

A reader is ``(path, fields, report) -> Iterator[SourceDocument]``. Bad input is skipped with a
line in the report, never silently: an empty, binary or unreadable file; a line that is not UTF-8
or not JSON (alone, with file:line); a record whose id is missing or not a string or integer; a
document with neither title nor text; a folder entry that links outside the folder. A metadata
value of the wrong type is an IngestError, because silently dropping a field would change what
filters match.
"""

from __future__ import annotations

import csv
import datetime
import gzip
import io
import json
import math
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ragcost.config.fields import FieldType, OutOfRange
from ragcost.errors import IngestError
from ragcost.records import SourceDocument
from ragcost.ingest.base import IngestReport
from ragcost.registry import Registry

Reader = Callable[[Path | None, dict[str, FieldType], IngestReport], Iterator[SourceDocument]]
reader_registry: Registry[Reader] = Registry("reader")


def read_source(path: str | None, reader: str | None, fields: dict[str, FieldType], report: IngestReport,
                duplicates: str = "once") -> Iterator[SourceDocument]:
    """Documents from ``path`` with the named reader, or the one its path implies; counts them in ``report.read``.
    ``duplicates``: the folder reader's rule for byte-identical files (source.duplicates)."""
    p = Path(path).expanduser() if path else None
    if reader is None:
        if p is None:
            raise IngestError("no source given; pass --source or set source: in the pipeline")
        if not p.exists():
            raise IngestError(f"source not found: {p}; pass --source or set source: in the pipeline")
        reader = infer_reader(p)
    fn = reader_registry.get(reader)
    if p is not None and not p.exists():
        raise IngestError(f"source not found: {p}; pass --source or set source: in the pipeline")
    docs = read_folder(p, fields, report, duplicates) if fn is read_folder else fn(p, fields, report)
    for doc in docs:
        report.read += 1
        yield doc


def infer_reader(p: Path) -> str:
    """The reader a path implies: by suffix for files, beir or folder for directories."""
    name = p.name.lower()
    if p.is_dir():
        return "beir" if _beir_corpus(p) else "folder"
    for suffix, r in ((".jsonl", "jsonl"), (".jsonl.gz", "jsonl"), (".csv", "csv"), (".parquet", "parquet")):
        if name.endswith(suffix):
            return r
    raise IngestError(f"cannot tell the format of {p}; name a reader ({', '.join(reader_registry.names())}) with --reader or source.reader in the pipeline")


def dedupe(docs: Iterable[SourceDocument], report: IngestReport) -> list[SourceDocument]:
    """One document per id: the LAST occurrence wins (a later line is taken as a correction), at the first one's position; repeats go to report.duplicates."""
    out: dict[str, SourceDocument] = {}
    seen = set(report.duplicates)
    for d in docs:
        if d.id in out and d.id not in seen:
            seen.add(d.id)
            report.duplicates.append(d.id)
        out[d.id] = d
    return list(out.values())


# -- records -> documents ------------------------------------------------------------------------


def _document(rec: dict[str, Any], where: str, fields: dict[str, FieldType], report: IngestReport, from_text: bool = False) -> SourceDocument | None:
    """A SourceDocument from one record, or None (with a report line) when it has no id or no content."""
    raw_id = rec.get("id", rec.get("_id"))
    if raw_id is None or raw_id == "":
        report.skip(where, "record has no 'id' or '_id'")
        return None
    doc_id = _id_text(raw_id, where, report)
    if doc_id is None:
        return None
    title = "" if rec.get("title") is None else str(rec["title"])
    text = "" if rec.get("text") is None else str(rec["text"])
    if not title.strip() and not text.strip():
        # nothing to embed or retrieve; keeping it would only add an empty vector
        report.skip(where, f"document {doc_id} has no title or text")
        return None
    bad = _lone_surrogate(doc_id, title, text, *(rec.get(n) for n in fields))
    if bad is not None:
        report.skip(where, f"{bad}; fix the \\u escape (a lone surrogate cannot be stored)")
        return None
    meta = {}
    for name, ft in fields.items():
        value = rec.get(name)
        if value is None or value == "":
            continue
        if from_text:
            value = _from_text(value, ft, where)
        try:
            meta[name] = ft.check(value)
        except ValueError as e:
            raise IngestError(f"{where}: {e}{_type_fix(value, ft, e)}") from None
    return SourceDocument(id=doc_id, text=text, title=title, metadata=meta, origin=where)


def _id_text(raw_id: Any, where: str, report: IngestReport) -> str | None:
    """The id as stored text, or None (reported): only strings and integers are ids, and an int and a
    string that become the same text are reported as a clash (1 and "1" would otherwise merge silently)."""
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
        shown = json.dumps(raw_id, default=str)[:40] if not isinstance(raw_id, float) else repr(raw_id)
        report.skip(where, f"id {shown} is a {type(raw_id).__name__}; an id must be a string or an integer")
        return None
    if isinstance(raw_id, int):
        try:
            text = str(raw_id)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            report.skip(where, "id is an integer too long to write as text; use a string id")
            return None
    else:
        text = raw_id
    kind = type(raw_id).__name__
    prev = report.id_kinds.get(text)
    if prev is not None and prev[0] != kind:
        report.duplicate_note(f"id {text!r} at {where} ({kind}) and at {prev[1]} ({prev[0]}) are the same id once stored as text; the last one is kept")
    report.id_kinds[text] = (kind, where)
    return text


def _lone_surrogate(*values: Any) -> str | None:
    """'lone surrogate ...' when a JSON \\ud800-style escape left a string that cannot be encoded."""
    for v in values:
        for s in v if isinstance(v, list) else [v]:
            if isinstance(s, str):
                try:
                    s.encode("utf-8")
                except UnicodeEncodeError as e:
                    return f"lone surrogate U+{ord(s[e.start]):04X} at char {e.start}"
    return None


def _from_text(value: Any, ft: FieldType, where: str) -> Any:
    """Convert a csv cell to the declared type (lists are JSON arrays)."""
    if not isinstance(value, str):
        return value
    try:
        if ft.is_list:
            items = json.loads(value)
            return [_scalar_from_text(x, ft.base) for x in items] if isinstance(items, list) else items
        return _scalar_from_text(value, ft.base)
    except (ValueError, json.JSONDecodeError):
        hint = ' as a JSON array like ["a", "b"]' if ft.is_list else ""
        raise IngestError(f"{where}: field {ft.name!r} is {ft.spec}; got {value!r}: write it{hint} as a {ft.spec}") from None


def _scalar_from_text(x: Any, base: str) -> Any:
    if not isinstance(x, str):
        return x
    s = x.strip()
    if base == "int":
        return int(s)
    if base == "float":
        f = float(s)
        if not math.isfinite(f):
            raise ValueError(s)  # NaN never matches a filter and inf breaks ordering: refuse it
        return f
    if base == "bool":
        low = s.lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ValueError(s)
    return x


_SCALAR_SPECS = {bool: "bool", int: "int", float: "float", str: "str"}


def _spec_for(value: Any) -> str | None:
    """The field type that would hold ``value``, or None when no declared type can (a dict, a nested or mixed list)."""
    if isinstance(value, list):
        kinds = {_SCALAR_SPECS.get(type(v)) for v in value}
        if kinds == {"int", "float"}:
            kinds = {"float"}
        return f"list[{kinds.pop()}]" if len(kinds) == 1 and None not in kinds else None
    return _SCALAR_SPECS.get(type(value))


def _type_fix(value: Any, ft: FieldType, err: ValueError) -> str:
    """What to do about a value its declared field refuses. Declaring the field as another type is offered only
    when that type would hold the value and differs from the declared one."""
    if isinstance(err, OutOfRange):  # the right type, a value no store can hold: its message says what to do
        return ""
    spec = _spec_for(value)
    if spec is None:
        return (f"; expected {ft.spec}: fix the value (a metadata value is a string, number or boolean, or a list of "
                "one of those kinds)")
    if spec == ft.spec:
        return f"; expected {ft.spec}: fix the value"
    return f"; expected {ft.spec}: fix the value or declare the field as {spec}"


def _read_bytes(p: Path, report: IngestReport, binary: bool = False) -> bytes | None:
    """A text file's bytes (gunzipped for .gz), or None (reported) when it is unreadable, empty or binary
    (``binary``: a file binary by nature, a PDF: unreadable or empty only)."""
    try:
        raw = p.read_bytes()
    except OSError as e:
        report.skip(str(p), f"cannot read: {e.strerror or e}")
        return None
    if p.name.lower().endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            report.skip(str(p), f"not a valid gzip file ({e}); re-compress it or remove the .gz suffix")
            return None
    if not raw.strip():
        report.skip(str(p), "empty file")
        return None
    if binary:
        return raw
    nul = raw.find(b"\0", 0, 8192)
    if nul >= 0:
        # text never holds NUL: this is a binary file, and reading it line by line would only report noise
        report.skip(str(p), f"binary file (NUL byte at offset {nul}), not text; point the source at a text file")
        return None
    return raw


def _read_pdf_bytes(p: Path, report: IngestReport) -> bytes | None:
    """A PDF's bytes (binary by nature), or None (reported) when unreadable, empty or not a PDF at all."""
    raw = _read_bytes(p, report, binary=True)
    if raw is None:
        return None
    if b"%PDF-" not in raw[:1024]:
        report.skip(str(p), "not a PDF (no %PDF- header); rename it to its real kind")
        return None
    return raw


def _lines(raw: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, line) split on b"\\n" only: U+2028 and U+0085 are text, not line ends."""
    offset = 0
    for no, line in enumerate(raw.split(b"\n"), start=1):
        yield no, offset, line.rstrip(b"\r")
        offset += len(line) + 1


def _need_path(p: Path | None, reader: str) -> Path:
    if p is None:
        raise IngestError(f"reader {reader!r} needs a path; pass --source or set source: in the pipeline")
    return p


# -- readers -----------------------------------------------------------------------------------


@reader_registry.register("jsonl")
def read_jsonl(path: Path | None, fields: dict[str, FieldType], report: IngestReport) -> Iterator[SourceDocument]:
    """One JSON object per line (.jsonl or .jsonl.gz)."""
    p = _need_path(path, "jsonl")
    raw = _read_bytes(p, report)
    if raw is None:
        return
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    for no, offset, data in _lines(raw):
        if not data.strip():
            continue
        where = f"{p}:{no}"
        try:
            line = data.decode("utf-8")  # line by line: one bad byte costs one line, not the file
        except UnicodeDecodeError as e:
            report.skip(where, f"not UTF-8 (byte offset {offset + e.start}); re-encode the line as UTF-8")
            continue
        try:
            rec = json.loads(line, parse_constant=_refuse_constant)
        except json.JSONDecodeError as e:
            report.skip(where, f"malformed JSON: {e.msg} at char {e.pos}")
            continue
        except ValueError as e:  # NaN/Infinity, or an integer with more digits than Python converts
            report.skip(where, f"malformed JSON: {e}")
            continue
        except RecursionError:
            report.skip(where, "malformed JSON: nested too deeply")
            continue
        if not isinstance(rec, dict):
            report.skip(where, f"expected a JSON object, got {type(rec).__name__}")
            continue
        doc = _document(rec, where, fields, report)
        if doc is not None:
            yield doc


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON; write null or a number")


@reader_registry.register("csv")
def read_csv(path: Path | None, fields: dict[str, FieldType], report: IngestReport) -> Iterator[SourceDocument]:
    """A CSV file with a header row; cells are converted to the declared types."""
    p = _need_path(path, "csv")
    raw = _read_bytes(p, report)
    if raw is None:
        return
    # surrogateescape keeps a bad byte as U+DC80..U+DCFF, so one bad row is skipped, not the file
    text = raw.decode("utf-8-sig", errors="surrogateescape")
    csv.field_size_limit(2**31 - 1)  # documents are long; the default 128 KiB cell limit would reject them
    rows = csv.DictReader(io.StringIO(text, newline=""))
    while True:
        try:
            rec = next(rows)
        except StopIteration:
            break
        except csv.Error as e:  # a NUL byte past the first 8 KiB, mostly
            report.skip(f"{p}:{rows.line_num}", f"malformed CSV: {e}; the rest of the file is not read")
            return
        # the header is line 1; a quoted cell may span lines, so ask the reader where it is
        where = f"{p}:{rows.line_num}"
        if _lone_surrogate(*rows.fieldnames):
            report.skip(f"{p}:1", "the header is not UTF-8; re-encode the file as UTF-8")
            return
        cells = [v for v in rec.values() if isinstance(v, str)] + list(rec.get(None) or [])
        if _lone_surrogate(*cells):
            report.skip(where, "not UTF-8; re-encode the row as UTF-8")
            continue
        doc = _document(rec, where, fields, report, from_text=True)
        if doc is not None:
            yield doc


@reader_registry.register("parquet")
def read_parquet(path: Path | None, fields: dict[str, FieldType], report: IngestReport) -> Iterator[SourceDocument]:
    """A Parquet file (pyarrow), read one record batch at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = _need_path(path, "parquet")
    if p.stat().st_size == 0:
        report.skip(str(p), "empty file")
        return
    try:
        pf = pq.ParquetFile(p)
    except (pa.ArrowException, OSError) as e:
        report.skip(str(p), f"not a Parquet file: {e}")
        return
    row = 0
    for batch in pf.iter_batches():
        for rec in batch.to_pylist():
            row += 1
            doc = _document(rec, f"{p}:row {row}", fields, report)
            if doc is not None:
                yield doc


@reader_registry.register("folder")
def read_folder(path: Path | None, fields: dict[str, FieldType], report: IngestReport,
                duplicates: str = "once") -> Iterator[SourceDocument]:
    """Every file below a folder that a reader reads (text, Markdown, reStructuredText, HTML, PDF:
    :mod:`ragcost.ingest.formats`); id = relative posix path (a PDF page: ``path#page=N``), title = the file's own
    (front matter, heading, <title>, /Title) or the stem. The file's own metadata fills the declared fields; the
    others are named once in the report, as are files of other kinds and byte-identical copies (read once unless
    ``duplicates`` is keep)."""
    import hashlib

    from ragcost.ingest.formats import EXTRACTORS, SUFFIXES, FormatError

    root = _need_path(path, "folder")
    real_root = root.resolve()
    every = sorted(x for x in root.rglob("*") if x.is_file())
    files = [x for x in every if x.suffix.lower() in SUFFIXES]
    for x in every:  # named by kind; hidden files and folders (.git/, .DS_Store) are not the corpus
        rel = x.relative_to(root)
        if x.suffix.lower() not in SUFFIXES and not any(part.startswith(".") for part in rel.parts):
            report.unread.setdefault(x.suffix.lower() or "(no suffix)", []).append(rel.as_posix())
    if not files:
        report.skip(str(root), f"no file below it of a kind the folder reader reads ({' '.join(SUFFIXES)})")
    seen: dict[str, str] = {}
    for f in files:
        target = f.resolve()
        if not target.is_relative_to(real_root):
            # a link out of the folder would index whatever it points at (/etc/hostname, ~/.ssh/...)
            report.skip(str(f), f"links to {target}, outside the source folder {real_root}; copy the file into the folder to index it")
            continue
        raw = _read_pdf_bytes(f, report) if f.suffix.lower() == ".pdf" else _read_bytes(f, report)
        if raw is None:
            continue
        rel = f.relative_to(root).as_posix()
        digest = hashlib.sha256(raw).hexdigest()
        if digest in seen and duplicates != "keep":
            report.same_content.append(f"{rel} = {seen[digest]}")
            continue
        seen.setdefault(digest, rel)
        try:
            parts = EXTRACTORS[f.suffix.lower()](f, raw)
        except FormatError as e:
            report.skip(str(f), str(e))
            continue
        for part in parts:
            rec: dict[str, Any] = {"id": rel + part.id_suffix, "title": part.title.strip() or f.stem, "text": part.text}
            for key, value in part.meta.items():
                if key in fields:
                    rec[key] = value.isoformat() if isinstance(value, (datetime.date, datetime.time)) else value
                elif key != "title":
                    report.undeclared[key] = report.undeclared.get(key, 0) + (1 if part is parts[0] else 0)
            doc = _document(rec, str(f) + part.id_suffix, fields, report, from_text=True)
            if doc is not None:
                yield doc


@reader_registry.register("beir")
def read_beir(path: Path | None, fields: dict[str, FieldType], report: IngestReport) -> Iterator[SourceDocument]:
    """A BEIR dataset folder: corpus.jsonl(.gz) with _id, title, text (and declared metadata)."""
    root = _need_path(path, "beir")
    corpus = _beir_corpus(root)
    if corpus is None:
        raise IngestError(f"{root} has no corpus.jsonl or corpus.jsonl.gz; point --source at a BEIR dataset folder")
    yield from read_jsonl(corpus, fields, report)


@reader_registry.register("pydoc-topics")
def read_pydoc_topics(path: Path | None, fields: dict[str, FieldType], report: IngestReport) -> Iterator[SourceDocument]:
    """The standard library's help topics (pydoc_data.topics): a small real corpus that needs no files."""
    from pydoc_data.topics import topics

    for key in sorted(topics):
        doc = _document({"id": key, "title": key, "text": topics[key]}, f"pydoc_data.topics[{key!r}]", {}, report)
        if doc is not None:
            yield doc


def _beir_corpus(root: Path) -> Path | None:
    return next((root / n for n in ("corpus.jsonl", "corpus.jsonl.gz") if (root / n).is_file()), None)
