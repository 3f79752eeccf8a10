"""mkdocs hooks: the generated reference pages and the benchmark JSON files.

- ``<!-- generated: cli -->`` becomes every command's ``--help`` as the typer app prints it;
- ``<!-- generated: yaml KIND -->`` becomes tables of the JSON Schema ``ragcost schema KIND`` writes
  (pipeline, index, pricing; eval and routing from their models, which `ragcost schema` does not write);
- ``bench/out/*`` (the JSON each benchmark table came from, and its plots) is published beside the
  pages, so a page links ``bench/out/serve.json`` and shows ``bench/out/serve.svg``;
- ``measured/<name>.md``, one generated page per ``bench/out/<name>.json`` (every value it holds, by
  its path in the JSON, with the command that makes it), and ``measured/index.md`` listing them: the
  measurements are read from the files the benchmarks wrote, never typed into a page.
Nothing here touches the network.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_GENERATED = re.compile(r"<!--\s*generated:\s*(cli|yaml\s+\w+)\s*-->")


def on_files(files, config):
    from mkdocs.structure.files import File

    for p in sorted((REPO / "bench" / "out").glob("*")):
        if p.is_file():
            files.append(File(f"bench/out/{p.name}", src_dir=str(REPO), dest_dir=config["site_dir"],
                              use_directory_urls=config["use_directory_urls"]))
    for uri, text in measured_pages().items():
        files.append(File.generated(config, uri, content=text))
    return files


# --- measured results ---------------------------------------------------------------------------------

MAX_ROWS = 400  # a page lists at most this many values; the JSON (linked) holds the rest
# Files whose name says nothing of the benchmark that wrote them.
PAIRS = "python -m bench.cache --pairs bench/data/cache_pairs_tune.jsonl,bench/data/cache_pairs_test.jsonl"
WRITTEN_BY = {"index_vs_raw": "python -m bench.index_estimate --docs 400 --repeats 5",
              "cache_pairs": PAIRS, "cache_pairs_first_heldout": PAIRS}


def bench_command(stem: str, data: Any) -> str:
    """The command that writes ``bench/out/<stem>.json``: its benchmark module, found by the JSON's own name
    (``benchmark``/``bench``) or the longest bench module name the file's name starts with."""
    if stem in WRITTEN_BY:
        return WRITTEN_BY[stem]
    modules = {p.stem for p in (REPO / "bench").glob("*.py") if p.stem not in ("__init__", "common")}
    named = data.get("benchmark") or data.get("bench") if isinstance(data, dict) else None
    if isinstance(named, str) and named in modules:
        return f"python -m bench.{named}"
    prefix = max((m for m in modules if stem == m or stem.startswith(m + "_")), key=len, default=None)
    return f"python -m bench.{prefix}" if prefix else "(no benchmark module of this name)"


def flatten(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """(path, value) for every number, string, boolean and null in ``value``; a short list of scalars is one value."""
    if isinstance(value, dict):
        return [row for k, v in value.items() for row in flatten(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        if len(value) <= 12 and all(not isinstance(v, (dict, list)) for v in value):
            return [(path, value)]
        return [row for i, v in enumerate(value) for row in flatten(v, f"{path}[{i}]")]
    return [(path, value)]


def _value(v: Any) -> str:
    if isinstance(v, float):
        v = f"{v:.6g}"
    elif isinstance(v, list):
        v = ", ".join(_value(x) for x in v)
    return _cell(v)


def measured_page(stem: str, data: Any) -> str:
    rows = flatten(data)
    lines = [f"# {stem}", "",
             f"Generated from [`bench/out/{stem}.json`](../bench/out/{stem}.json), which `{bench_command(stem, data)}` "
             "wrote; every value below is read from that file when the site is built.", ""]
    if not rows:
        return "\n".join(lines + ["The file holds no values.", ""])
    lines += ["| value | measured |", "|---|---|"]
    lines += [f"| `{_cell(path) or '(the file)'}` | {_value(v)} |" for path, v in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines += ["", f"{len(rows) - MAX_ROWS:,} more values are in the JSON file."]
    return "\n".join(lines) + "\n"


def measured_pages() -> dict[str, str]:
    """``measured/<stem>.md`` for each ``bench/out/*.json``, and ``measured/index.md`` listing them."""
    out: dict[str, str] = {}
    index = ["# Measured results", "",
             "One page per JSON file the benchmarks wrote (`bench/out/`), generated when the site is built: what",
             "each run measured, by its path in the file, and the command that measures it again. The",
             "[Benchmarks](../benchmarks.md) page says what each benchmark checks and where its targets are.", "",
             "| file | command | values |", "|---|---|---|"]
    for p in sorted((REPO / "bench" / "out").glob("*.json")):
        data = json.loads(p.read_text(encoding="utf-8"))
        out[f"measured/{p.stem}.md"] = measured_page(p.stem, data)
        index.append(f"| [{p.stem}]({p.stem}.md) | `{bench_command(p.stem, data)}` | {len(flatten(data)):,} |")
    out["measured/index.md"] = "\n".join(index) + "\n"
    return out


def on_page_markdown(markdown: str, page, config, files) -> str:
    def sub(m: re.Match) -> str:
        what = m.group(1).split()
        return cli_reference() if what[0] == "cli" else yaml_reference(what[1])

    return _GENERATED.sub(sub, markdown)


# --- CLI ----------------------------------------------------------------------------------------------


def commands() -> list[list[str]]:
    """Every command path of the typer app: ["index"], ["cache", "stats"], ..."""
    import typer.main

    from ragcost.cli import main

    if not main.app.registered_commands:
        main._register()
    group = typer.main.get_command(main.app)
    out: list[list[str]] = []
    for name, cmd in sorted(group.commands.items()):
        subs = getattr(cmd, "commands", None)
        out.append([name])
        if subs:
            out.extend([name, sub] for sub in sorted(subs))
    return out


def help_text(path: list[str]) -> str:
    from typer.testing import CliRunner

    from ragcost.cli import main

    os.environ.setdefault("TERMINAL_WIDTH", "100")
    res = CliRunner().invoke(main.app, [*path, "--help"], prog_name="ragcost", env={"NO_COLOR": "1", "TERM": "dumb"})
    if res.exit_code != 0:
        raise RuntimeError(f"ragcost {' '.join(path)} --help exited {res.exit_code}: {res.output}")
    return res.output.rstrip()


def cli_reference() -> str:
    parts = []
    for path in commands():
        name = " ".join(path)
        parts.append(f"## `ragcost {name}` {{#{'-'.join(path)}}}\n\n```text\n{help_text(path)}\n```\n")
    return "\n".join(parts)


# --- YAML ---------------------------------------------------------------------------------------------


def _schema(kind: str) -> dict[str, Any]:
    if kind == "eval":
        from ragcost.evaluate.spec import EvalSpec

        return EvalSpec.model_json_schema()
    if kind == "routing":
        from ragcost.evaluate.routing import RoutingFile

        return RoutingFile.model_json_schema()
    from ragcost.runtime.schema import json_schema

    return json_schema(kind)


def _cell(text: Any) -> str:
    return (str(text).replace("\n", " ").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("{", "&#123;").replace("}", "&#125;"))  # attr_list would read a trailing {...} as attributes


class _Render:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.sections: list[str] = []
        self.done: set[str] = set()

    def anchor(self, name: str) -> str:
        return f"{self.kind}-{name}".lower()

    def type_of(self, p: dict[str, Any], defs: dict[str, Any]) -> str:
        if "$ref" in p:
            name = p["$ref"].split("/")[-1]
            self.model(name, defs[name], defs)
            return f"[{name}](#{self.anchor(name)})"
        if "const" in p:
            return f"`{p['const']}`"
        if "enum" in p:
            return " or ".join(f"`{v}`" for v in p["enum"])
        for key in ("anyOf", "oneOf"):
            if key in p:
                kinds = [self.type_of(x, defs) for x in p[key] if x.get("type") != "null"]
                nullable = any(x.get("type") == "null" for x in p[key])
                return " or ".join(kinds) + (" or null" if nullable else "")
        t = p.get("type")
        if t == "array":
            return f"list of {self.type_of(p.get('items', {}), defs)}"
        if t == "object" and isinstance(p.get("additionalProperties"), dict):
            return f"map of {self.type_of(p['additionalProperties'], defs)}"
        return t or "any"

    def model(self, name: str, schema: dict[str, Any], defs: dict[str, Any], title: str | None = None) -> None:
        if name in self.done:
            return
        self.done.add(name)
        slot = len(self.sections)
        self.sections.append("")  # this model's table comes before the models it refers to
        rows = []
        required = set(schema.get("required", []))
        for key, p in schema.get("properties", {}).items():
            default = "required" if key in required else (f"`{json.dumps(p['default'])}`" if "default" in p else "")
            rows.append(f"| `{key}` | {_cell(self.type_of(p, defs))} | {_cell(default)} | {_cell(p.get('description', ''))} |")
        head = f"### {title or name} {{#{self.anchor(name)}}}\n\n"
        doc = f"{_cell(schema['description'])}\n\n" if schema.get("description") else ""
        table = "| key | type | default | what it is |\n|---|---|---|---|\n" + "\n".join(rows) if rows else "(no keys)"
        self.sections[slot] = head + doc + table + "\n"


def yaml_reference(kind: str) -> str:
    schema = _schema(kind)
    r = _Render(kind)
    stages = None
    if kind == "pipeline":
        stages = schema["properties"]["stages"]["items"].pop("oneOf")
        schema["properties"]["stages"]["items"] = {"type": "stage (a table per stage type below)"}
    r.model(schema.get("title", kind), schema, schema.get("$defs", {}), title=f"{kind} file")
    for st in stages or []:
        stage_type = st["properties"]["type"].get("const") or st["properties"]["type"].get("enum", ["?"])[0]
        r.model(f"stage-{stage_type}", st, st.get("$defs", {}), title=f"stage `{stage_type}`")
    return "\n".join(r.sections)
