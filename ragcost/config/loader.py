"""Load YAML into pydantic models; every error names file:line:column and the field."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Sequence, TypeVar

from pydantic import BaseModel, ValidationError

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
        return _yaml().load(io.StringIO(text))
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        what = " ".join(str(x) for x in (e.context, e.problem) if x)
        raise ConfigError(f"{where}: malformed YAML: {what}; fix the syntax at that position") from None
    except YAMLError as e:
        raise ConfigError(f"{name}: malformed YAML: {str(e).splitlines()[0]}") from None


def position(node: Any, loc: Sequence[Any]) -> tuple[int, int] | None:
    """Best (line, col), 1-based, of the deepest node of ``loc`` that exists in the YAML tree."""
    best: tuple[int, int] | None = None
    if hasattr(node, "lc"):
        best = (node.lc.line + 1, node.lc.col + 1)
    for key in loc:
        lc = getattr(node, "lc", None)
        try:
            if isinstance(node, dict) and key in node:
                if lc is not None:
                    line, col = lc.key(key)
                    best = (line + 1, col + 1)
                node = node[key]
            elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
                if lc is not None:
                    line, col = lc.item(key)
                    best = (line + 1, col + 1)
                node = node[key]
            else:
                break
        except (KeyError, IndexError, TypeError, AttributeError):
            break
    return best


_BASIC = {"str", "int", "float", "bool", "list", "dict", "none"}


def _is_union_tag(x: Any) -> bool:
    """pydantic names the branch of a union in ``loc`` (``str``, ``IndexConfig``); it is not a field."""
    if not isinstance(x, str):
        return False
    return x in _BASIC or "[" in x or x.startswith("function-") or (len(x) > 1 and x[0].isupper() and any(c.islower() for c in x))


def _pick(errors: list[dict]) -> list[dict]:
    """Of a union's branch errors, keep those of the branch the input was meant for (a mapping -> the model)."""
    def tagged_basic(e: dict) -> bool:
        return any(isinstance(x, str) and x in _BASIC for x in e["loc"])

    rest = [e for e in errors if not tagged_basic(e)]
    return rest or errors


def format_validation_error(err: ValidationError, source: str, data: Any, prefix: Sequence[Any] = ()) -> str:
    """One line per problem is too many for a CLI: report the first, and how many more."""
    errors = _pick(err.errors())
    e = errors[0]
    loc = [*prefix, *[x for x in e["loc"] if not _is_union_tag(x)]]
    pos = position(data, loc)
    where = f"{source}:{pos[0]}:{pos[1]}" if pos else source
    field = ".".join(str(x) for x in loc) or "(top level)"
    msg = e["msg"]
    if e["type"] == "extra_forbidden":
        msg = "unknown key; remove it or check its spelling"
    elif e["type"] == "missing":
        msg = "required field is missing; add it"
    else:
        inp = e.get("input")
        if inp is not None and not isinstance(inp, (dict, list)):
            msg = f"{msg} (got {inp!r})"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {field}: {msg}{more}"


def plain(data: Any) -> Any:
    """ruamel's commented maps/sequences as plain dicts/lists (for pydantic and for dumping)."""
    if isinstance(data, dict):
        return {str(k): plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    return data


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
