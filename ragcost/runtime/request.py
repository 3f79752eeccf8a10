"""The one check of a query request's text and k, for every way in: the CLI, the Python API, the server.

A blank question would still embed and "find" arbitrary documents, and ``k=0`` or ``k=-3`` would
quietly mean "the default" or "nothing"; each is refused with a one-line QueryError instead.
"""

from __future__ import annotations

from typing import Any, Optional

from ragcost.errors import QueryError

MAX_K = 10_000


def check_text(text: Any, where: str = "the query text") -> str:
    """``text`` if it can be asked; not a string, blank, or holding undecodable bytes is refused, naming ``where``."""
    if not isinstance(text, str):
        raise QueryError(f"{where}: must be a string, not {type(text).__name__}; give the question as text")
    if not text.strip():
        raise QueryError(f"{where}: the query is empty; give the question as text")
    for i, c in enumerate(text):
        if 0xD800 <= ord(c) <= 0xDFFF:
            # Undecodable argv bytes arrive as lone surrogates (surrogateescape): name the byte.
            byte = f"byte 0x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else f"lone surrogate \\u{ord(c):04x}"
            raise QueryError(f"{where}: not valid UTF-8 ({byte} at character {i + 1}); pass the query as UTF-8 text")
    return text


def check_k(k: Any, where: str = "k") -> Optional[int]:
    """``k`` (None: the retrieve stage's default), refused unless a whole number from 1 to MAX_K."""
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int):
        raise QueryError(f"{where} {k!r} is not a whole number; give results per query, from 1 to {MAX_K}")
    if not 1 <= k <= MAX_K:
        raise QueryError(f"{where} {k} is out of range: give results per query, from 1 to {MAX_K} "
                         "(leave it out for the retrieve stage's k)")
    return k
