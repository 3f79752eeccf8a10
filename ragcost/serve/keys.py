"""API keys: from a file or an environment variable the pipeline names (``serve.keys``), never the YAML.

The keys JSON maps each key to ``{"tenant": NAME, "filter": {...}}``. Lookup compares the presented
key against every key with ``hmac.compare_digest`` on SHA-256 digests and never stops early, so a
wrong key and a missing one take the same time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ragcost.errors import ConfigError


@dataclass(frozen=True)
class Tenant:
    name: Optional[str]
    filter: Optional[dict]


class Keys:
    def __init__(self, entries: dict[str, Tenant]) -> None:
        self._digests = [(hashlib.sha256(k.encode()).digest(), t) for k, t in entries.items()]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def lookup(self, presented: Optional[str]) -> Optional[Tenant]:
        """The key's tenant, or None; the same work whether the key is wrong, missing or right."""
        got = hashlib.sha256((presented or "").encode()).digest()
        found = None
        for digest, tenant in self._digests:
            if hmac.compare_digest(got, digest) and presented:
                found = tenant
        return found


def load_keys(spec: Optional[str], base: Path, where: str) -> Keys:
    """``file:PATH`` (relative to the pipeline) or ``env:VAR``; None gives an open server (no keys)."""
    if spec is None:
        return Keys({})
    kind, _, ref = spec.partition(":")
    if kind == "env":
        raw = os.environ.get(ref)
        if raw is None:
            raise ConfigError(f"{where}: serve.keys names env var {ref!r}, which is not set; export it (JSON: {{key: {{tenant, filter}}}})")
        origin = f"env var {ref}"
    else:
        path = Path(ref) if Path(ref).is_absolute() else base / ref
        if not path.is_file():
            raise ConfigError(f"{where}: serve.keys file {str(path)!r} not found; create it (JSON: {{key: {{tenant, filter}}}})")
        raw, origin = path.read_text(encoding="utf-8"), str(path)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{origin}: not valid JSON ({e.msg}); write {{\"KEY\": {{\"tenant\": \"acme\", \"filter\": {{...}}}}}}") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{origin}: expected a non-empty object mapping each key to {{tenant, filter}}")
    entries = {}
    for key, v in data.items():
        if not isinstance(v, dict) or set(v) - {"tenant", "filter"} or not isinstance(v.get("filter", {}), (dict, type(None))):
            raise ConfigError(f"{origin}: the entry of key {key[:4]}... must be {{\"tenant\": NAME, \"filter\": {{...}}}}")
        entries[key] = Tenant(v.get("tenant"), v.get("filter") or None)
    return Keys(entries)
