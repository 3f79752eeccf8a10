"""API keys: from a file or an environment variable the pipeline names (``serve.keys``), never the YAML.

The keys JSON maps each key to ``{"tenant": NAME, "filter": {...}}``. Lookup compares the presented
key against every key with ``hmac.compare_digest`` on SHA-256 digests and never stops early, so a
wrong key and a missing one take the same time. A keys file is read again when it changes
(checked every ``serve.keys_reload_s``) and on SIGHUP, so a revoked key stops working without a
restart; a duplicate key is refused at load (JSON would silently keep the later one).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from time import monotonic
from typing import Callable, Optional

from ragcost.errors import ConfigError, RagcostError

log = logging.getLogger("ragcost.serve")


@dataclass(frozen=True)
class Tenant:
    name: Optional[str]
    filter: Optional[dict]


class Keys:
    def __init__(self, entries: dict[str, Tenant], source: Optional["KeySource"] = None) -> None:
        self._digests = [(hashlib.sha256(k.encode()).digest(), t) for k, t in entries.items()]
        self.source = source
        self._checked = monotonic()

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    @property
    def tenants(self) -> list[str]:
        return sorted({t.name for _, t in self._digests if t.name})

    def lookup(self, presented: Optional[str]) -> Optional[Tenant]:
        """The key's tenant, or None; the same work whether the key is wrong, missing or right."""
        self.maybe_reload()
        got = hashlib.sha256((presented or "").encode()).digest()
        found = None
        for digest, tenant in self._digests:
            if hmac.compare_digest(got, digest) and presented:
                found = tenant
        return found

    def maybe_reload(self) -> None:
        """A keys file that changed is read again (checked at most every ``source.every_s``)."""
        if self.source is None or self.source.path is None or monotonic() - self._checked < self.source.every_s:
            return
        self._checked = monotonic()
        if self.source.stamp() != self.source.seen:
            self.reload()

    def reload(self) -> bool:
        """Read the keys again (SIGHUP, or the file changed): revoked keys stop working now.

        A file that no longer loads keeps the keys in force and logs one line."""
        if self.source is None:
            return False
        try:
            fresh = self.source.load()
        except ConfigError as e:
            log.error("serve.keys not reloaded, the keys in force stay: %s", e)
            return False
        self._digests = fresh._digests
        log.info("serve.keys reloaded from %s: %d key(s)", self.source.origin, len(self._digests))
        return True


def _no_duplicates(origin: str):
    def hook(pairs: list[tuple[str, object]]) -> dict:
        seen: dict = {}
        for k, v in pairs:
            if k in seen:
                shown = k if k in ("tenant", "filter") else f"{k[:4]}..."
                raise ConfigError(f"{origin}: key {shown!r} appears twice; each key (and each field of an entry) "
                                  "must appear once: remove one of them")
            seen[k] = v
        return seen
    return hook


@dataclass
class KeySource:
    """Where the keys come from, so they can be read again."""

    spec: str
    base: Path
    where: str
    every_s: float = 2.0
    path: Optional[Path] = None
    seen: Optional[tuple] = None
    check: Optional[Callable[[dict], None]] = None  # a key's filter against the pipeline's declared fields

    @property
    def origin(self) -> str:
        return str(self.path) if self.path else self.spec

    def stamp(self) -> Optional[tuple]:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def load(self) -> Keys:
        kind, _, ref = self.spec.partition(":")
        if kind == "env":
            raw = os.environ.get(ref)
            if raw is None:
                raise ConfigError(f"{self.where}: serve.keys names env var {ref!r}, which is not set; export it (JSON: {{key: {{tenant, filter}}}})")
            origin = f"env var {ref}"
        else:
            path = Path(ref) if Path(ref).is_absolute() else self.base / ref
            self.path = path
            if not path.is_file():
                raise ConfigError(f"{self.where}: serve.keys file {str(path)!r} not found; create it (JSON: {{key: {{tenant, filter}}}})")
            self.seen = self.stamp()
            raw, origin = path.read_text(encoding="utf-8"), str(path)
        entries = parse_keys(raw, origin)
        for key, tenant in entries.items():
            if tenant.filter is not None and self.check is not None:
                try:
                    self.check(tenant.filter)
                except RagcostError as e:  # said at start (or reload), not to each client of the key
                    raise ConfigError(f"{origin}: the filter of key {key[:4]}... (tenant {tenant.name!r}): {e}; fix it "
                                      "in the keys file, or declare the field under the pipeline's metadata") from None
        return Keys(entries, self)


def parse_keys(raw: str, origin: str) -> dict[str, Tenant]:
    try:
        data = json.loads(raw, object_pairs_hook=_no_duplicates(origin))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{origin}: not valid JSON ({e.msg}); write {{\"KEY\": {{\"tenant\": \"acme\", \"filter\": {{...}}}}}}") from None
    except RecursionError:
        raise ConfigError(f"{origin}: nested too deeply to read; write {{\"KEY\": {{\"tenant\": NAME, \"filter\": {{...}}}}}}") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{origin}: expected a non-empty object mapping each key to {{tenant, filter}}")
    entries = {}
    for key, v in data.items():
        if not key.strip():
            raise ConfigError(f"{origin}: an empty key would match a request without one; remove it")
        if not isinstance(v, dict) or set(v) - {"tenant", "filter"} or not isinstance(v.get("filter", {}), (dict, type(None))):
            raise ConfigError(f"{origin}: the entry of key {key[:4]}... must be {{\"tenant\": NAME, \"filter\": {{...}}}}")
        tenant = v.get("tenant")
        if tenant is not None and (not isinstance(tenant, str) or not tenant.strip()):
            shown = json.dumps(tenant)[:40]
            raise ConfigError(f"{origin}: the tenant of key {key[:4]}... is {shown} ({type(tenant).__name__}); a tenant is "
                              "one name, e.g. \"tenant\": \"acme\" (give each tenant its own key)")
        entries[key] = Tenant(tenant, v.get("filter") or None)
    return entries


def load_keys(spec: Optional[str], base: Path, where: str, every_s: float = 2.0,
              check: Optional[Callable[[dict], None]] = None) -> Keys:
    """``file:PATH`` (relative to the pipeline) or ``env:VAR``; None gives an open server (no keys). ``check``
    refuses a key's filter (the pipeline's declared fields), at load and at every reload."""
    if spec is None:
        return Keys({})
    return KeySource(spec, base, where, every_s, check=check).load()


def read_secret(spec: Optional[str], base: Path, where: str) -> Optional[str]:
    """A token from ``file:PATH`` (relative to the pipeline) or ``env:VAR``, stripped; None when not configured."""
    if spec is None:
        return None
    kind, _, ref = spec.partition(":")
    if kind == "env":
        raw = os.environ.get(ref)
        if raw is None:
            raise ConfigError(f"{where}: names env var {ref!r}, which is not set; export it")
    else:
        path = Path(ref) if Path(ref).is_absolute() else base / ref
        if not path.is_file():
            raise ConfigError(f"{where}: file {str(path)!r} not found; create it with the token")
        raw = path.read_text(encoding="utf-8")
    if not raw.strip():
        raise ConfigError(f"{where}: the token is empty; put the token there")
    return raw.strip()
