"""Text the CLI prints: terminal-safe (no markup, no control sequences) and JSON that is always valid."""

from __future__ import annotations

import json
import math
import re
from typing import Any

# ESC sequences first (CSI `ESC [ ... final`, OSC `ESC ] ... BEL|ESC \`, and two-byte ones), then any
# other C0 control except \t and \n, DEL, and the C1 range (0x80-0x9f: 0x9b is a one-byte CSI).
_ESC_SEQ = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[PX^_][^\x1b]*(?:\x1b\\)?|[ -~]?)")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def terminal_safe(text: Any, one_line: bool = False) -> str:
    """``text`` without escape sequences or control characters, lone surrogates shown as U+FFFD.

    ``one_line`` also folds newlines and tabs to spaces (error messages are one line).
    """
    s = _ESC_SEQ.sub("", str(text))
    s = _CONTROL.sub("", s)
    s = _SURROGATE.sub("\ufffd", s)
    if one_line:
        s = " ".join(s.split())
    return s


def plain(text: Any, style: str = "") -> Any:
    """A rich ``Text`` of user or document text: never parsed as markup, control characters removed."""
    from rich.text import Text

    return Text(terminal_safe(text), style=style)


def markup_safe(text: Any) -> str:
    """``text`` made terminal-safe and markup-escaped, for an f-string that also holds markup of ours."""
    from rich.markup import escape

    return escape(terminal_safe(text))


def finite(obj: Any) -> Any:
    """``obj`` with NaN and ±inf floats replaced by None and numpy scalars/arrays made plain Python."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k) if not isinstance(k, (str, int, float, bool)) and k is not None else k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    tolist = getattr(obj, "tolist", None)  # numpy scalars and arrays
    if callable(tolist) and type(obj).__module__ == "numpy":
        return finite(tolist())
    return obj


def dumps(obj: Any, indent: int | None = 2) -> str:
    """Standard JSON: non-finite numbers become null and every non-ASCII character (lone surrogates too) is escaped."""
    return json.dumps(finite(obj), indent=indent, allow_nan=False, ensure_ascii=True, default=str)
