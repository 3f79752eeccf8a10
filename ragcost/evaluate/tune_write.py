"""`ragcost tune --write`: the chosen configuration into the pipeline YAML, comments and layout kept (ruamel round trip)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from ragcost.atomic import replace_text
from ragcost.errors import ConfigError
from ragcost.runtime.load import load_pipeline
from ragcost.runtime.writeback import loads_as_pipeline


def _yaml() -> Any:
    from ruamel.yaml import YAML

    y = YAML()  # round-trip: keeps comments, key order and flow style
    y.preserve_quotes = True
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)  # `  - item`, as the pipelines in this repository are written
    return y


def _index_value(r: Any, pipeline_path: Path, old: Any) -> Any:
    """The index file (as the pipeline named it, else relative to it) when its own search parameters
    were chosen, else the build and search parameters inline."""
    from ragcost.index import load_index_file

    f = Path(r.index_file)
    if f.is_file() and f.resolve() != pipeline_path.resolve():  # the pipeline's own inline index is no index file
        cfg = load_index_file(f)
        if dict(cfg.search) == dict(r.search):
            # relative to where the loader looks: beside the pipeline as named (a symlink's own folder, not its target's)
            base = Path(os.path.abspath(pipeline_path)).parent
            if isinstance(old, str) and (base / old).resolve() == f.resolve():
                return old
            return os.path.relpath(f.resolve(), base)
    return {"backend": r.backend, "kind": r.kind, "build": dict(r.build), "search": dict(r.search)}


def _flow(value: Any) -> Any:
    """Mappings written on one line, as the pipelines in this repository are."""
    from ruamel.yaml.comments import CommentedMap

    if not isinstance(value, dict):
        return value
    m = CommentedMap((k, _flow(v)) for k, v in value.items())
    m.fa.set_flow_style()
    return m


def write_choice(pipeline_path: Path, chosen: Any, note: str) -> list[str]:
    """Set embed (with dim and precision), chunking and index in the pipeline file; returns the keys changed."""
    y = _yaml()
    text = pipeline_path.read_text(encoding="utf-8")
    doc = y.load(text)
    if not isinstance(doc, dict):
        raise ConfigError(f"{pipeline_path}: not a YAML mapping; --write edits a pipeline file")
    from ragcost.evaluate.grid import merge_embed

    embed = merge_embed(dict(doc.get("embed") or {}), {k: v for k, v in chosen.embed.items() if k not in ("dim", "precision")})
    embed.update(dim=int(chosen.dim), precision=chosen.precision)
    values = {"embed": embed, "chunking": {**dict(doc.get("chunking") or {}), **chosen.chunking},
              "index": _index_value(chosen, pipeline_path, doc.get("index"))}
    changed = []
    for key, value in values.items():
        old = doc.get(key)
        if _plain(old) != _plain(value):
            changed.append(key)
        doc[key] = _flow(value)
        doc.yaml_add_eol_comment(f"ragcost tune: {note}", key)
    out = io.StringIO()
    y.dump(doc, out)
    # An in-place edit (mode, owner, a symlink's target kept), and only of a pipeline that still loads.
    replace_text(pipeline_path, out.getvalue(), check=loads_as_pipeline(pipeline_path, load_pipeline))
    return changed


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v
