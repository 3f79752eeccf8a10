"""The one check of a query request's text and k, for every way in: the CLI, the Python API, the server.

A blank question would still embed and "find" arbitrary documents, and ``k=0`` or ``k=-3`` would
quietly mean "the default" or "nothing"; each is refused with a one-line QueryError instead.
"""

from __future__ import annotations

import unicodedata
from typing import Any, Optional

from ragcost.errors import QueryError

MAX_K = 10_000


def check_text(text: Any, where: str = "the query text") -> str:
    """``text`` if it can be asked; not a string, blank, or holding undecodable bytes is refused, naming ``where``."""
    if not isinstance(text, str):
        raise QueryError(f"{where}: must be a string, not {type(text).__name__}; give the question as text")
    if not text.strip():
        raise QueryError(f"{where}: the query is empty; give the question as text")
    unseen = invisible_only(text)
    if unseen:
        raise QueryError(f"{where}: the query holds only {unseen}, nothing to ask; give the question as text")
    for i, c in enumerate(text):
        if 0xD800 <= ord(c) <= 0xDFFF:
            # Undecodable argv bytes arrive as lone surrogates (surrogateescape): name the byte.
            byte = f"byte 0x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else f"lone surrogate \\u{ord(c):04x}"
            raise QueryError(f"{where}: not valid UTF-8 ({byte} at character {i + 1}); pass the query as UTF-8 text")
    return text


def invisible_only(text: str) -> Optional[str]:
    """What ``text`` holds when it holds nothing that can be read (e.g. "NUL (U+0000) x 3"): only white space, control
    characters (category Cc) and format characters such as zero-width spaces (Cf); None when it holds a visible one.
    Such a text would embed to an arbitrary vector (and be billed and cached), or look like hidden instructions."""
    seen: dict[str, int] = {}
    for c in text:
        if c.isspace():
            continue
        if unicodedata.category(c) not in ("Cc", "Cf"):
            return None
        seen[c] = seen.get(c, 0) + 1
    if not seen:
        return None
    names = [f"{unicodedata.name(c, 'NUL' if c == chr(0) else 'control character')} (U+{ord(c):04X})"
             + (f" x {n}" if n > 1 else "") for c, n in list(seen.items())[:3]]
    return ", ".join(names) + (", …" if len(seen) > 3 else "")


def check_k(k: Any, where: str = "k") -> Optional[int]:
    """``k`` (None: the retrieve stage's default), refused unless a whole number from 1 to MAX_K."""
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int):
        raise QueryError(f"{where} {k!r} is not a whole number; give results per query, from 1 to {MAX_K}")
    if not 1 <= k <= MAX_K:
        raise QueryError(f"{where} {k} is out of range: give results per query, from 1 to {MAX_K} "
                         "(leave it out for the pipeline's own number)")
    return k
