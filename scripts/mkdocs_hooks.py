"""mkdocs hooks: the generated reference pages and the benchmark JSON files.

- ``<!-- generated: cli -->`` becomes every command's ``--help`` as the typer app prints it;
- ``<!-- generated: yaml KIND -->`` becomes tables of the JSON Schema ``ragcost schema KIND`` writes
  (pipeline, index, pricing; eval and routing from their models, which `ragcost schema` does not write);
- ``bench/out/*`` (the JSON each benchmark table came from, and its plots) is published beside the
  pages, so a page links ``bench/out/serve.json`` and shows ``bench/out/serve.svg``.
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
    return files


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
