"""The code blocks of README.md and docs/**/*.md, found with sybil and checked by what they are.

The convention (docs/contributing.md says the same for writers):

- ```yaml is validated the way ragcost loads that kind of file: a pipeline by ``load_pipeline`` (the
  model, every stage's own params, guard checks, index, routes), an index file by ``load_index_file``,
  a price book by ``load_price_book``, an eval spec by ``load_spec`` (its pipeline, dataset and index
  files must exist), a routing spec by its model. The kind is guessed from the keys, or named by a
  marker ``<!-- yaml: pipeline|index|pricing|eval|routing -->`` on the line before the block.
  ``<!-- yaml: KIND lines -->`` checks each line as its own file (a block of alternatives).
  A fragment gets the keys it leaves out (a pipeline's ``name``, a price book's ``version``...).
- ```bash / ```sh runs as one ``bash -euo pipefail`` script; ```console runs each ``$ command`` (a
  ``$`` line that opens the block or follows a blank line; ``\\`` continues it) and compares what it
  prints with the lines below it (a line ``...`` matches any lines). ```python runs as one program, alone. ```toml and ```json must parse.
- ``<!-- not-run: REASON -->`` on the line before a block says it is not run here and why; the reason
  is shown as the test's skip reason. An empty reason is a failure.
- Blocks with another language or none (output, text) are not examples.

Commands and programs run in a scratch copy of the project (pipelines/, indexes/, pricing/, eval/,
docs/examples/, with ../shared beside it), so they never write into the clone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

REPO = Path(__file__).resolve().parents[2]
RUN = {"bash", "sh", "shell", "console", "python", "py"}
PARSE = {"toml", "json"}
YAML = {"yaml", "yml"}
KINDS = ("pipeline", "index", "pricing", "eval", "routing")
TIMEOUT_S = 180
_MARKER = re.compile(r"<!--\s*(not-run|yaml)\s*:\s*(.*?)\s*-->\s*\Z", re.S)


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the block's first source line
    language: str
    source: str
    marker: Optional[str]  # "not-run" | "yaml" | None
    argument: str

    @property
    def where(self) -> str:
        return f"{rel(self.path)}:{self.line}"


def rel(path: Path) -> str:
    """A path as the clone names it (a file outside the clone, e.g. a test's fixture, by its full path)."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


class BlockParser:
    """One region per fenced block whose language we check, carrying the marker written before it."""

    lexer = RawFencedCodeBlockLexer(info_pattern=re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE))

    def __call__(self, document: Document):
        for region in self.lexer(document):
            language = (region.lexemes["info"].strip().split() or [""])[0].lower()
            if language not in RUN | PARSE | YAML:
                continue
            before = document.text[: region.start].rstrip()
            m = _MARKER.search(before[before.rfind("<!--"):]) if before.endswith("-->") else None
            source = region.lexemes["source"]
            line = document.text.count("\n", 0, region.start) + 2
            block = Block(Path(document.path), line, language, str(source), m and m.group(1), m.group(2) if m else "")
            yield Region(region.start, region.end, parsed=block, evaluator=evaluate)


_COMMAND = re.compile(r"^(\$ )?(ragcost|python3?|\.venv/bin/\S+|pip|curl|bash|RAGCOST_\w+=\S+)(\s|$)")


def unlabelled_commands(path: Path) -> list[str]:
    """Blocks with no language (or ``text``) that open with a command: they would escape the checks."""
    document = Document(path.read_text(encoding="utf-8"), str(path))
    out = []
    for region in BlockParser.lexer(document):
        info = region.lexemes["info"].strip().lower()
        first = next((ln for ln in str(region.lexemes["source"]).splitlines() if ln.strip()), "")
        if info in ("", "text") and _COMMAND.match(first.strip()):
            out.append(f"{rel(path)}:{document.text.count(chr(10), 0, region.start) + 1}: {first.strip()[:60]}")
    return out


SYBIL = Sybil(parsers=[BlockParser()], path=str(REPO), patterns=["README.md", "docs/**/*.md"])


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def examples() -> list[Example]:
    out: list[Example] = []
    for path in doc_files():
        out.extend(SYBIL.parse(path))
    return out


# --- the scratch project ------------------------------------------------------------------------------

_PROJECT: dict[str, Path] = {}
COPIED = ("pipelines", "indexes", "pricing", "eval", "docs/examples")


def project() -> Path:
    """A copy of the project's YAML folders under a temporary folder, ../shared beside it (made once)."""
    if "root" not in _PROJECT:
        import tempfile

        import atexit

        top = Path(tempfile.mkdtemp(prefix="ragcost-docs-"))
        atexit.register(shutil.rmtree, top, True)
        root = top / "ragcost"
        for name in COPIED:
            if (REPO / name).is_dir():
                shutil.copytree(REPO / name, root / name)
        (root / "docs-blocks").mkdir(parents=True, exist_ok=True)
        shared = REPO.parent / "shared"
        if shared.is_dir():
            (top / "shared").symlink_to(shared)
        _PROJECT["root"] = root
    return _PROJECT["root"]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{e.get('PATH', '')}"
    e["PYTHONPATH"] = f"{REPO}{os.pathsep}{e['PYTHONPATH']}" if e.get("PYTHONPATH") else str(REPO)
    e.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", COLUMNS="200", NO_COLOR="1",
             TERM="dumb")
    return e


def _run(argv: list[str], block: Block, stdin: Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=project(), env=env(), input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S)


def _tail(text: str, n: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


# --- evaluators ---------------------------------------------------------------------------------------


def evaluate(example: Example) -> Optional[str]:
    block: Block = example.parsed
    if block.marker == "not-run":
        return None  # the test skips it with the reason (and fails an empty one) before evaluating
    if block.language in YAML:
        return check_yaml(block)
    if block.language == "toml":
        try:
            tomllib.loads(block.source)
        except tomllib.TOMLDecodeError as e:
            return f"{block.where}: TOML does not parse: {e}"
        return None
    if block.language == "json":
        try:
            json.loads(snippets(block.source))
        except json.JSONDecodeError as e:
            return f"{block.where}: JSON does not parse: {e}"
        return None
    if block.language == "console":
        return run_console(block)
    if block.language in ("python", "py"):
        proc = _run([sys.executable, "-c", block.source], block)
        return None if proc.returncode == 0 else f"{block.where}: python exited {proc.returncode}:\n{_tail(proc.stderr)}"
    proc = _run(["bash", "-euo", "pipefail", "-c", block.source], block)
    if proc.returncode != 0:
        return f"{block.where}: bash exited {proc.returncode}:\n{_tail(proc.stdout, 10)}\n{_tail(proc.stderr)}"
    return None


def run_console(block: Block) -> Optional[str]:
    """Each ``$ command`` runs; the lines after it are its expected stdout+stderr (``...`` matches any lines)."""
    steps: list[tuple[str, list[str]]] = []
    lines = block.source.splitlines()
    i = 0
    while i < len(lines):
        # A command is a `$ ` line that opens the block or follows a blank line (output may begin "$ per ...").
        if not (lines[i].startswith("$ ") and (i == 0 or not lines[i - 1].strip())):
            if steps:
                steps[-1][1].append(lines[i])
            elif lines[i].strip():
                return f"{block.where}: a console block starts with a `$ command` line"
            i += 1
            continue
        cmd = lines[i][2:]
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd[:-1] + " " + lines[i].strip()
        steps.append((cmd, []))
        i += 1
    for cmd, expected in steps:
        proc = _run(["bash", "-o", "pipefail", "-c", cmd], block)
        got = (proc.stdout + proc.stderr).rstrip("\n").splitlines()
        if not matches([e.rstrip() for e in expected], [g.rstrip() for g in got]):
            return (f"{block.where}: `{cmd}` printed something else (exit {proc.returncode}).\nexpected:\n"
                    + "\n".join(expected) + "\ngot:\n" + "\n".join(got))
    return None


def matches(expected: list[str], got: list[str]) -> bool:
    """Line by line; an expected line ``...`` stands for any number of lines (doctest's ELLIPSIS, by line)."""
    while expected and not expected[-1].strip():
        expected = expected[:-1]
    if not expected:
        return not got
    if expected[0] == "...":
        return any(matches(expected[1:], got[j:]) for j in range(len(got) + 1))
    return bool(got) and got[0] == expected[0] and matches(expected[1:], got[1:])


_SNIPPET = re.compile(r'^--8<--\s+"([^"]+)"\s*$', re.M)


def snippets(text: str) -> str:
    """pymdownx.snippets' ``--8<-- "path"`` lines replaced by the file (paths from the clone's root, as mkdocs.yml says)."""
    return _SNIPPET.sub(lambda m: (REPO / m.group(1)).read_text(encoding="utf-8"), text)


# --- YAML ---------------------------------------------------------------------------------------------


def yaml_kind(data: object, block: Block) -> str:
    """The marker's kind, else guessed from the top-level keys."""
    if block.marker == "yaml":
        kind = block.argument.split()[0] if block.argument.split() else ""
        if kind not in KINDS:
            raise ValueError(f"{block.where}: <!-- yaml: {block.argument} -->: unknown kind; use one of {', '.join(KINDS)}")
        return kind
    keys = set(data) if isinstance(data, dict) else set()
    if "routing" in keys:
        return "routing"
    if keys & {"resources", "queries_per_month", "fleet"}:
        return "pricing"
    if keys & {"grid", "dataset", "embedders", "dims", "precisions"}:
        return "eval"
    if keys and keys <= {"backend", "kind", "build", "search", "device", "shards"}:
        return "index"
    return "pipeline"


# What a fragment leaves out, appended as YAML lines (so its own lines keep their numbers).
FILL = {
    "pipeline": {"name": "docs-example"},
    "pricing": {"version": "docs", "as_of": "2026-01-01", "queries_per_month": 1000000},
    "eval": {"pipeline": "../pipelines/scifact.yaml", "dataset": "../../shared/data/scifact",
             "grid": [{"index": "../indexes/flat.yaml"}]},
}


def check_yaml(block: Block) -> Optional[str]:
    from ragcost.config.loader import parse_yaml
    from ragcost.errors import RagcostError

    parts = [(block.line, block.source)]
    if block.marker == "yaml" and "lines" in block.argument.split()[1:]:
        parts = [(block.line + n, ln + "\n") for n, ln in enumerate(block.source.splitlines())
                 if ln.strip() and not ln.lstrip().startswith("#")]
    for line, text in parts:
        try:
            data = parse_yaml(text, "docs-blocks/block-1.yaml")
            kind = yaml_kind(data, block)
            problem = _load(kind, text, data, line, block)
        except (RagcostError, ValueError) as e:
            problem = _relocate(str(e), line, block)
        if problem:
            return problem
    return None


def _load(kind: str, text: str, data: object, line: int, block: Block) -> Optional[str]:
    from ragcost.config.loader import validate

    if not isinstance(data, dict):
        return f"{block.where}: a {kind} YAML block must be a mapping, not {type(data).__name__}"
    missing = {k: v for k, v in FILL.get(kind, {}).items() if k not in data}
    if kind == "pricing" and "resources" not in data:  # e.g. a fleet: block, shown "beside resources:"
        from ragcost.config.base import plain
        from ragcost.config.loader import read_yaml

        missing["resources"] = plain(read_yaml(REPO / "pricing" / "default.yaml"))["resources"]
    if missing:
        text = text.rstrip("\n") + "\n" + "".join(f"{k}: {json.dumps(v, default=str)}\n" for k, v in missing.items())
    folder = "eval-blocks" if kind in ("eval", "routing") else "docs-blocks"
    path = project() / folder / f"block-{line}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    cwd = os.getcwd()
    os.chdir(project())
    try:
        if kind == "pipeline":
            from ragcost.runtime.load import load_pipeline

            load_pipeline(path)
        elif kind == "index":
            from ragcost.index import load_index_file

            load_index_file(path)
        elif kind == "pricing":
            from ragcost.cost.pricebook import load_price_book

            load_price_book(path)
        elif kind == "eval":
            from ragcost.evaluate.spec import load_spec

            load_spec(path)
        else:
            from ragcost.config.loader import read_yaml
            from ragcost.evaluate.routing import RoutingFile

            validate(RoutingFile, read_yaml(path), str(path))
    finally:
        os.chdir(cwd)
    return None


def _relocate(message: str, line: int, block: Block) -> str:
    """A loader's ``file:line:col`` in the scratch copy, said as the Markdown file's line."""
    def at(m: re.Match) -> str:
        return f"{rel(block.path)}:{line + int(m.group(1)) - 1}:{m.group(2)}"

    message = re.sub(r"\S*(?:docs|eval)-blocks/block-\d+\.yaml:(\d+):(\d+)", at, message)
    message = re.sub(r"\S*(?:docs|eval)-blocks/block-\d+\.yaml", rel(block.path), message)
    return f"{block.where}: YAML block does not validate: {message}"
