"""Derived model files (an ONNX export, a distilled static model), built once into a cache folder.

The folder is named by the embedder's fingerprint, so a different source model or option gets a
different folder, and a finished folder is never rebuilt. A build is written into a hidden sibling
and renamed into place, so a crash or a failed build never leaves a folder that looks finished.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable

DONE = "ragcost-build.json"  # written last: a folder without it is not a finished build


def cache_root() -> Path:
    """``$RAGCOST_CACHE`` or ``~/.cache/ragcost``."""
    env = os.environ.get("RAGCOST_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ragcost"


def built_folder(kind: str, key: str, build: Callable[[Path], dict[str, Any]]) -> Path:
    """``<cache>/<kind>/<key>``, calling ``build(tmp_folder)`` first when it is not there yet.

    ``build`` writes the files and returns what made them (recorded in ``ragcost-build.json``).
    Exceptions from ``build`` propagate; the half-written folder is removed.
    """
    final = cache_root() / kind / key
    if (final / DONE).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{key}.{uuid.uuid4().hex[:12]}.tmp"
    tmp.mkdir()
    try:
        t0 = time.perf_counter()
        made_by = build(tmp)
        made_by["build_seconds"] = round(time.perf_counter() - t0, 3)
        (tmp / DONE).write_text(json.dumps(made_by, indent=2, sort_keys=True, default=str))
        if final.exists():  # an unfinished folder from an older crash, or a racing build that won
            if (final / DONE).is_file():
                return final
            shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
