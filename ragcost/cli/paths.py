"""Where an embedded database URL keeps its file: the CLI checks it exists before opening creates it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

_EMBEDDED = ("duckdb:///", "sqlite:///")


def embedded_path(url: str) -> Optional[Path]:
    """The file of a ``duckdb:///`` or ``sqlite:///`` URL; None for in-memory and server URLs."""
    for scheme in _EMBEDDED:
        if url.startswith(scheme):
            rest = url[len(scheme):].split("?", 1)[0]
            return None if rest in ("", ":memory:") or rest.startswith(":memory:") else Path(rest)
    return None
