"""Write a calibrated useful-document threshold back into a pipeline YAML, keeping its comments and layout.

The file is read and written with ruamel's round-trip mode, so every other line stays as the
team wrote it. ``useful`` becomes ``{judge: score, threshold: X}`` (other keys of an existing
``useful`` mapping, e.g. ``precision``, stay), with a comment above it saying where the number
came from. The new text is loaded as a pipeline first (from a temp file beside the original, so
relative paths resolve the same), and only a pipeline that loads replaces the file, atomically, as an
in-place edit (``ragcost.atomic.replace_text``: mode, owner and a symlink's target kept).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Callable

from ragcost.atomic import replace_text
from ragcost.errors import ConfigError


def write_useful_threshold(path: str | Path, threshold: float, note: str) -> str:
    """Store ``useful: {judge: score, threshold: threshold}`` in the pipeline at ``path``; returns the new text.

    ``note`` becomes the comment line above ``useful:``. A pipeline the new threshold would make
    invalid (the load-time judge check) is refused with that error, and the file is left as it was.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.util import load_yaml_guess_indent

    from ragcost.runtime.load import load_pipeline

    p = Path(path)
    # A previous calibration's comment line goes; the new one takes its place.
    original = p.read_text(encoding="utf-8")
    kept = "".join(line for line in original.splitlines(keepends=True) if not line.lstrip().startswith(f"# {_CALIBRATED}"))
    _, indent, seq_indent = load_yaml_guess_indent(kept)
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096  # never re-wrap a long flow mapping the team wrote on one line
    # ruamel guesses the sequence indent (dash included) and the dash's offset; mappings keep our 2.
    y.indent(mapping=2, sequence=indent or 2, offset=seq_indent or 0)
    data = y.load(kept)
    if not isinstance(data, CommentedMap):
        raise ConfigError(f"{p}: not a pipeline mapping; cannot store useful.threshold in it")
    useful = data.get("useful")
    if isinstance(useful, CommentedMap):
        useful["judge"] = "score"
        useful["threshold"] = threshold
    else:
        new = CommentedMap([("judge", "score"), ("threshold", threshold)])
        new.fa.set_flow_style()
        if "useful" in data:
            data["useful"] = new
        else:
            data.insert(_insert_at(data), "useful", new)
    _comment(data, note)
    out = io.StringIO()
    y.dump(data, out)
    text = out.getvalue()
    replace_text(p, text, check=loads_as_pipeline(p, load_pipeline))
    return text


def loads_as_pipeline(p: Path, load: Callable[[Path], object]) -> Callable[[Path], None]:
    """A ``replace_text`` check: the new text must load as a pipeline (errors name ``p``, not the temp file)."""
    def check(candidate: Path) -> None:
        try:
            load(candidate)
        except ConfigError as e:
            raise ConfigError(str(e).replace(str(candidate), str(p)) + f" (not written: {p} is unchanged)") from None
    return check


def last_scoring_scale(specs) -> tuple:
    """(scale, stage label) of the last stage that scores documents: the judge's scale (as the load-time check reads it)."""
    from ragcost.stages.base import COSINE

    scale, by = COSINE, "retrieve"  # the implicit embed + retrieve scores, unless a later stage re-scores
    for cls, params in specs:
        found = cls.scale_of(params)
        if found is not None:
            backend = getattr(params, "backend", None)
            scale, by = found, params.name or (f"{cls.type}:{backend}" if isinstance(backend, str) else cls.type)
    return scale, by


def _insert_at(data) -> int:
    """Before ``tracing``/``stages`` when present (where the README puts it), else at the end."""
    keys = list(data)
    for k in ("tracing", "stages"):
        if k in keys:
            return keys.index(k)
    return len(keys)


def _comment(data, note: str) -> None:
    """One comment line above ``useful:`` saying where the threshold came from."""
    data.yaml_set_comment_before_after_key("useful", before=f"{_CALIBRATED} {note}")


_CALIBRATED = "useful.threshold calibrated by"
