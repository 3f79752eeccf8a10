"""The expected-useful judge's calibration file: P(relevant) of a final hit, as fitted by `ragcost eval`.

The file (``<pipeline>.calibration.json`` beside the pipeline) holds the fitted model as plain
numbers, so query time needs numpy only: an isotonic step function over one feature (``x``/``y``
points, interpolated), or a logistic regression over standardised features. The fit itself is
scikit-learn's (``ragcost.evaluate.expected``). The file also says what it was fit on — the
fingerprint (embedder bytes, dim, precision, index, scoring stages, context size) and the dataset
— and a pipeline that differs, a file that does not parse, or one fit on fewer than
:data:`MIN_JUDGED` judged documents is refused with one line naming the file and the refit command.

Features of a hit are measured on the query's final documents (best first, one per document):
``score`` (the last scoring stage's), ``rank`` (1-based), ``gap`` (the top document's score less
this one's), ``log_rank``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from ragcost.errors import ConfigError, FingerprintError

FORMAT = 1
KIND = "ragcost-useful-calibration"
MIN_JUDGED = 50  # judged documents a fit needs before its probabilities mean anything
FEATURES = ("score", "rank", "gap", "log_rank")


def calibration_path(pipeline_path: str | Path, name: Optional[str] = None) -> Path:
    """Where a pipeline's calibration lives: ``useful.calibration`` relative to the pipeline, else beside it."""
    p = Path(pipeline_path)
    if name:
        return Path(name) if Path(name).is_absolute() else p.parent / name
    return p.with_name(p.stem + ".calibration.json")


def fingerprint_of(model: str, model_fingerprint: str, dim: int, precision: str, chunking: Mapping[str, Any],
                   backend: str, kind: str, build: Mapping[str, Any], search: Mapping[str, Any],
                   scoring: Sequence[Mapping[str, Any]], k: int) -> dict[str, Any]:
    """What a calibration is valid for: the same on the eval side (a measured configuration) and the pipeline's."""
    return {"model": model, "model_fingerprint": model_fingerprint, "dim": int(dim), "precision": precision,
            "chunking": dict(chunking), "index": {"backend": backend, "kind": kind, "build": dict(build), "search": dict(search)},
            "scoring": [dict(s) for s in scoring], "k": int(k)}


def doc_features(hits: Iterable[Mapping[str, Any]], k: Optional[int] = None) -> tuple[list[str], np.ndarray]:
    """(doc ids, feature rows) of the first ``k`` distinct documents of ``hits`` (best first)."""
    best: dict[str, float] = {}
    for h in hits:
        d = str(h["doc_id"])
        s = h.get("score")
        if s is None or not math.isfinite(float(s)):
            continue
        if d not in best:
            if k is not None and len(best) >= k:
                break
            best[d] = float(s)
        else:
            best[d] = max(best[d], float(s))
    ids = list(best)
    return ids, features_of([best[d] for d in ids])


def features_of(scores: Sequence[float]) -> np.ndarray:
    """Feature rows (columns in :data:`FEATURES` order) for one query's document scores, best first."""
    s = np.asarray(scores, dtype=np.float64)
    if not len(s):
        return np.zeros((0, len(FEATURES)))
    rank = np.arange(1, len(s) + 1, dtype=np.float64)
    return np.column_stack([s, rank, s.max() - s, np.log(rank)])


@dataclass
class Model:
    """A fitted P(relevant | features): ``isotonic`` over one feature or ``logistic`` over several."""

    kind: str
    features: list[str]
    x: list[float] = field(default_factory=list)  # isotonic: increasing thresholds
    y: list[float] = field(default_factory=list)  # isotonic: P at each threshold
    coef: list[float] = field(default_factory=list)  # logistic, on standardised features
    intercept: float = 0.0
    mean: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)

    def predict(self, rows: np.ndarray) -> np.ndarray:
        """P(relevant) per row of a :func:`features_of` matrix."""
        if not len(rows):
            return np.zeros(0)
        cols = [FEATURES.index(f) for f in self.features]
        X = rows[:, cols]
        if self.kind == "isotonic":
            return np.interp(X[:, 0], np.asarray(self.x), np.asarray(self.y))
        z = ((X - np.asarray(self.mean)) / np.asarray(self.scale)) @ np.asarray(self.coef) + self.intercept
        return 1.0 / (1.0 + np.exp(-z))

    def label(self) -> str:
        return f"{self.kind}({', '.join(self.features)})"

    def to_dict(self) -> dict[str, Any]:
        keep = ("x", "y") if self.kind == "isotonic" else ("coef", "intercept", "mean", "scale")
        return {"kind": self.kind, "features": self.features, **{k: getattr(self, k) for k in keep}}


@dataclass
class Calibration:
    """A calibration file's content: the model, what it was fit on, and its held-out quality."""

    model: Model
    fingerprint: dict[str, Any]
    dataset: dict[str, Any] = field(default_factory=dict)  # name, queries, qrels hash
    judged: int = 0  # (document, qrels verdict) pairs it was fit on
    relevant: int = 0
    quality: dict[str, Any] = field(default_factory=dict)  # held-out: ECE, predicted / actual, buckets
    made_by: str = ""  # the command that fit it (and refits it)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "kind": KIND, "model": self.model.to_dict(), "fingerprint": self.fingerprint,
                "dataset": self.dataset, "judged": self.judged, "relevant": self.relevant, "quality": self.quality,
                "made_by": self.made_by}

    def expected(self, hits: Iterable[Mapping[str, Any]]) -> float:
        """Expected useful documents of one query's final context: the sum of P(relevant) of its documents."""
        _, rows = doc_features(hits, self.fingerprint.get("k"))
        return float(self.model.predict(rows).sum())

    def label(self) -> str:
        """The judge's name in reports and the ledger; the dataset name is the file's text, so its control
        characters (an ESC sequence, a newline) are shown escaped, never sent to a terminal."""
        name = str(self.dataset.get("name", "?"))
        safe = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name)
        return f"calibrated {self.model.label()} on {safe}"


def check_writable(path: str | Path) -> None:
    """Refuse, before a long eval, a calibration path ``--write`` could not replace in place: a directory, or a
    read-only file (0444 was made so on purpose). A missing file, or a symlink to a writable one, is fine."""
    from ragcost.atomic import check_editable

    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"--write: {p} is a directory, not a calibration file; move it away or set useful.calibration "
                          "to another file name; nothing written")
    if p.exists():
        check_editable(p)


def save(cal: Calibration, path: str | Path) -> None:
    """Write the calibration file atomically (a crash leaves the old file or the new, never half). An existing file
    is edited in place as the pipeline YAML is: a symlink's target is written (the link stays a link), and the
    file keeps its mode, owner and group; a read-only file or a directory is refused (``check_writable``)."""
    from ragcost.atomic import replace_text, write_files

    p = Path(path)
    text = json.dumps(cal.to_dict(), indent=1, sort_keys=True)
    check_writable(p)
    if p.exists():
        replace_text(p, text)
    else:
        write_files(p.parent, {p.name: lambda tmp: tmp.write_text(text, encoding="utf-8")})


def load(path: str | Path, refit: str) -> Calibration:
    """The calibration at ``path``; a missing, corrupt or too-small file is one line naming it and ``refit``."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no calibration for useful: {{judge: calibrated}}; make one with `{refit}`")
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(d, dict) or d.get("kind") != KIND:
            raise ValueError("not a ragcost calibration file")
        if d.get("format") != FORMAT:
            raise ValueError(f"format {d.get('format')!r}, this ragcost reads {FORMAT}")
        m = d["model"]
        model = Model(kind=m["kind"], features=list(m["features"]), x=list(m.get("x", [])), y=list(m.get("y", [])),
                      coef=list(m.get("coef", [])), intercept=m.get("intercept", 0.0),
                      mean=list(m.get("mean", [])), scale=list(m.get("scale", [])))
        _check_model(model)
        cal = Calibration(model, dict(d["fingerprint"]), dict(d.get("dataset") or {}), int(d["judged"]),
                          int(d.get("relevant", 0)), dict(d.get("quality") or {}), str(d.get("made_by") or ""))
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{p}: corrupt calibration file ({type(e).__name__}: {e}); refit it with `{refit}`") from None
    if cal.judged < MIN_JUDGED:
        raise ConfigError(f"{p}: fit on {cal.judged} judged documents, fewer than {MIN_JUDGED}: its probabilities "
                          f"mean little; refit on more queries with `{refit}`")
    return cal


def _check_model(m: Model) -> None:
    if m.kind not in ("isotonic", "logistic") or not m.features or any(f not in FEATURES for f in m.features):
        raise ValueError(f"model {m.kind!r} over {m.features!r}")
    if m.kind == "isotonic":
        if len(m.features) != 1 or len(m.x) != len(m.y) or not m.x or not all(0 <= v <= 1 for v in m.y):
            raise ValueError("isotonic points must be matching x/y lists with y in [0, 1]")
        if any(b < a for a, b in zip(m.x, m.x[1:])):
            raise ValueError("isotonic x must increase")
        if any(b < a for a, b in zip(m.y, m.y[1:])):
            raise ValueError("isotonic y must not decrease (the fit is increasing in its feature)")
    elif not (len(m.coef) == len(m.mean) == len(m.scale) == len(m.features)) or any(s <= 0 for s in m.scale):
        raise ValueError("logistic coef/mean/scale must match the features, scale > 0")
    vals = [*m.x, *m.y, *m.coef, m.intercept, *m.mean, *m.scale]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals):
        raise ValueError("the model's numbers must be finite numbers (not booleans, strings or NaN)")


def check_fingerprint(cal: Calibration, expected: Mapping[str, Any], path: str | Path, refit: str) -> None:
    """Refuse a calibration fit for another configuration, naming what changed."""
    want = _flat(json.loads(json.dumps(dict(expected), sort_keys=True, default=str)))
    have = _flat(json.loads(json.dumps(cal.fingerprint, sort_keys=True, default=str)))
    changes = [f"{k}: {_short(have.get(k))} -> {_short(want.get(k))}" for k in sorted(set(have) | set(want))
               if have.get(k) != want.get(k)]
    if changes:
        raise FingerprintError(f"{path}: calibration was fit for another configuration ({'; '.join(changes[:3])}); "
                               f"refit it with `{refit}`")


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, list) and d:  # a list's items by position (scoring.0.options.rrf_k), so a change is named
        d = {str(i): v for i, v in enumerate(d)}
    if not isinstance(d, dict) or not d:
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _short(v: Any) -> str:
    s = json.dumps(v, default=str) if v is not None else "(none)"
    return s[:15] + "..." if len(s) > 24 else s
