"""Load YAML into pydantic models; every error names file:line:column and the field."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Sequence, TypeVar

from pydantic import BaseModel, ValidationError

from ragcost.config.base import format_validation_error, plain

from ragcost.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def _yaml():
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.allow_duplicate_keys = False
    return y


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file keeping line/column marks; a parse error is one line naming file:line:col."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: file not found; check the path (relative paths are read from {Path.cwd()})")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start}); save the file as UTF-8") from None
    return parse_yaml(text, str(p))


def parse_yaml(text: str, name: str = "<string>") -> Any:
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        data = _yaml().load(io.StringIO(text))
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        what = " ".join(str(x) for x in (e.context, e.problem) if x)
        raise ConfigError(f"{where}: malformed YAML: {what}; fix the syntax at that position") from None
    except YAMLError as e:
        raise ConfigError(f"{name}: malformed YAML: {str(e).splitlines()[0]}") from None
    check_alias_expansion(data, name)
    return data


# ruamel shares one object per anchor, so parsing is cheap; copying the tree into plain dicts
# (for pydantic) expands every alias. Nine levels of nine aliases are 9**9 values from ~500 bytes.
MAX_ALIAS_EXPANSION = 100_000


def check_alias_expansion(data: Any, name: str, limit: int = MAX_ALIAS_EXPANSION) -> None:
    """Refuse a tree whose aliases add more than ``limit`` values, or refer to themselves.

    Sizes are counted once per shared object, so the check itself is linear in the file.
    """
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    unique = 0
    stack: list[tuple[Any, bool]] = [(data, False)] if isinstance(data, (dict, list)) else []
    while stack:
        node, done = stack.pop()
        kids = list(node.values()) if isinstance(node, dict) else node
        if done:
            sizes[id(node)] = 1 + sum(sizes.get(id(k), 1) for k in kids)
            unique += 1 + sum(1 for k in kids if not isinstance(k, (dict, list)))
            if sizes[id(node)] - unique > limit:
                raise ConfigError(f"{_where(node, name)}: YAML aliases here expand to more than {limit:,} values; "
                                  "write the values out, or use fewer nested aliases (*name)")
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_:
            raise ConfigError(f"{_where(node, name)}: a YAML alias refers to the node that contains it; "
                              "remove the recursive alias (*name)")
        open_.add(id(node))
        stack.append((node, True))
        stack.extend((k, False) for k in kids if isinstance(k, (dict, list)))


def _where(node: Any, name: str) -> str:
    lc = getattr(node, "lc", None)
    return f"{name}:{lc.line + 1}:{lc.col + 1}" if lc is not None and lc.line is not None else name


def validate(model: type[M], data: Any, source: str, prefix: Sequence[Any] = (), context: dict | None = None, tree: Any = None) -> M:
    """Validate ``data`` against ``model``; a failure is a ConfigError naming source:line:col and the field.

    ``tree`` is the whole parsed file when ``data`` is a part of it found at ``prefix``.
    """
    try:
        return model.model_validate(plain(data), context=context)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source, data if tree is None else tree, prefix)) from None
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def load_model(model: type[M], path: str | Path, context: dict | None = None) -> M:
    """Read a YAML file and validate it as ``model``."""
    data = read_yaml(path)
    if data is None:
        raise ConfigError(f"{path}: the file is empty; see the README for an example")
    return validate(model, data, str(path), context=context)


def dump_yaml(model: BaseModel) -> str:
    """A model as YAML text that loads back to an equal model."""
    out = io.StringIO()
    _yaml().dump(model.model_dump(mode="json", exclude_defaults=False), out)
    return out.getvalue()
