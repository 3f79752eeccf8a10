"""The one strict base model and the one ValidationError formatter every YAML model uses."""

from __future__ import annotations

from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError


class Strict(BaseModel):
    """YAML maps one-to-one to models: an unknown key is an error, never silently ignored."""

    model_config = ConfigDict(extra="forbid")


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


# The fix, where pydantic's message names only the problem.
_FIXES = {"finite_number": "; write a plain number (not .inf, .nan or one beyond 1.8e308)"}


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
    loc = _without_branch_tags([*prefix, *[x for x in e["loc"] if not _is_union_tag(x)]], data)
    pos = position(data, loc)
    where = f"{source}:{pos[0]}:{pos[1]}" if pos else source
    field = ".".join(str(x) for x in loc) or "(top level)"
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        msg = "unknown key; remove it or check its spelling"
    elif e["type"] == "missing":
        msg = "required field is missing; add it"
    else:
        inp = e.get("input")
        if inp is not None and not isinstance(inp, (dict, list)):
            msg = f"{msg} (got {_short_repr(inp)})"
        msg += _FIXES.get(e["type"], "")
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {field}: {msg}{more}"


def _without_branch_tags(loc: list[Any], data: Any) -> list[Any]:
    """Drop a discriminated union's branch tag (``resources.gpu.time.x`` -> ``resources.gpu.x``).

    pydantic puts the discriminator's value in ``loc``; in the YAML it is a value of the mapping,
    not a key, so a key that is absent but equals one of the mapping's values is that tag.
    """
    out: list[Any] = []
    node = data
    for key in loc:
        if isinstance(node, dict) and isinstance(key, str) and key not in node \
                and key in {v for v in node.values() if isinstance(v, str)}:
            continue
        out.append(key)
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            node = node[key]
        else:
            node = None
    return out


def plain(data: Any) -> Any:
    """ruamel's commented maps/sequences as plain dicts/lists (for pydantic and for dumping)."""
    if isinstance(data, dict):
        return {str(k): plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    return data


def first_loc(err: ValidationError) -> tuple:
    """The location of the problem ``one_line`` reports (union tags dropped), for positioning it."""
    return tuple(x for x in _pick(err.errors())[0]["loc"] if not _is_union_tag(x))


def one_line(err: ValidationError, prefix: Sequence[Any] = (), known: Sequence[str] = (),
             unknown: str = "unknown key; remove it or check its spelling", top: str = "(top level)") -> str:
    """``field.path: message (got value)`` of the first problem, without a file position.

    For errors raised inside a model that a caller positions itself (a backend's own params
    inside a stage's YAML), and for a request body (``ragcost serve``: ``top="body"``). ``known`` lists the valid
    keys for an unknown-key error, which ``unknown`` words (e.g. "unknown build parameter for kind 'hnsw'").
    """
    errors = _pick(err.errors())
    e = errors[0]
    loc = [*prefix, *[x for x in e["loc"] if not _is_union_tag(x)]]
    field = ".".join(str(x) for x in loc) or top
    if e["type"] == "extra_forbidden":
        msg = unknown + (f"; known: {', '.join(known)}" if known else "")
    elif e["type"] == "missing":
        msg = "required field is missing; add it"
    else:
        msg = e["msg"].removeprefix("Value error, ")
        inp = e.get("input")
        if inp is not None and not isinstance(inp, (dict, list)):
            msg = f"{msg} (got {_short_repr(inp)})"
        msg += _FIXES.get(e["type"], "")
    return f"{field}: {msg}"


def _short_repr(value: Any, limit: int = 80) -> str:
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 3] + "..."
