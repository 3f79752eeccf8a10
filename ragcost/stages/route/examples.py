"""A labelled query file: one JSON object a line, ``{"text": ..., "label": ...}`` (more fields are kept).

Used by the ``knn`` router (its examples) and by ``ragcost eval --routing`` (the labelled set).
Every problem names ``file:line``: an empty text, a label that is not a route target, a line
that is not JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from ragcost.errors import ConfigError


@dataclass
class Example:
    text: str
    label: str
    line: int
    extra: dict[str, Any] = field(default_factory=dict)


def read_examples(path: Path, labels: Optional[Iterable[str]] = None) -> list[Example]:
    """The file's examples; ``labels``: the allowed labels (the pipeline's route targets)."""
    allowed = None if labels is None else list(labels)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the labelled file ({e.strerror}); fix the path") from None
    out: list[Example] = []
    for no, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}:{no}: not a JSON object ({e.msg}); write one {{\"text\": ..., \"label\": ...}} a line") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{no}: not a JSON object; write one {{\"text\": ..., \"label\": ...}} a line")
        text, label = row.pop("text", None), row.pop("label", None)
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"{path}:{no}: empty text {text!r}; every example needs the query it labels, or remove the line")
        if not isinstance(label, str) or (allowed is not None and label not in allowed):
            raise ConfigError(f"{path}:{no}: unknown label {label!r}; use one of the route targets: {', '.join(allowed or [])}")
        out.append(Example(text.strip(), label, no, row))
    if not out:
        raise ConfigError(f"{path}: no labelled examples; write one {{\"text\": ..., \"label\": ...}} a line")
    return out
