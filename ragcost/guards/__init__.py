"""Guard checks (pii, prompt_injection, grounded, budget), registered by name on import."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import replace
from typing import Iterable, Optional

from ragcost.guards import budget as _budget  # noqa: F401
from ragcost.guards import grounded as _grounded  # noqa: F401
from ragcost.guards import injection as _injection  # noqa: F401
from ragcost.guards import pii as _pii  # noqa: F401
from ragcost.guards.base import Finding, Guard, GuardParams, guard_registry
from ragcost.errors import ConfigError

__all__ = ["Finding", "Guard", "GuardParams", "guard_registry", "redact_document", "redact_document_text", "redact_id", "redacting_checks"]


def redacting_checks(checks: Iterable[str]) -> list[Guard]:
    """Guards for these check names; each must be able to redact (e.g. ``pii``)."""
    out = []
    for name in checks:
        cls = guard_registry.get(name)
        if "redact" not in cls.policies:
            able = ", ".join(n for n in guard_registry.names() if "redact" in guard_registry.get(n).policies)
            raise ConfigError(f"redact: check {name!r} cannot redact documents; checks that can: {able}")
        out.append(cls(cls.Params()))
    return out


def redact_document_text(text: str, checks: Iterable[str] = ("pii",)) -> str:
    """``text`` as it may be stored: every redacting check applied in turn."""
    for g in redacting_checks(checks):
        text = g.redact(text)
    return text


def redact_id(doc_id: str, redacted: str, key: bytes) -> str:
    """The stored form of an id that held personal data: its redacted text plus a keyed hash of the original.

    The hash keeps two ids that redact alike (``a@x.org``, ``b@x.org`` -> ``<EMAIL>``) apart and the
    same source id stable from run to run, so unchanged documents are not re-embedded and --prune
    still matches; without the key, the original cannot be confirmed by hashing guesses.
    """
    tag = hmac.new(key, doc_id.encode("utf-8"), hashlib.sha256).hexdigest()[:16]
    return f"{redacted}#{tag}"


def redact_document(doc, checks: Iterable[str] = ("pii",), id_key: Optional[bytes] = None):
    """A SourceDocument with id, title, text and string metadata redacted (so content hashes follow).

    An id without personal data is kept as it is (qrels and links still match); one with personal
    data becomes ``redact_id(id, redacted id, id_key)``. ``run_index`` passes the store's own key.
    """
    guards = redacting_checks(checks)

    def red(t):
        for g in guards:
            t = g.redact(t)
        return t

    doc_id = red(doc.id)
    if doc_id != doc.id:
        if id_key is None:
            raise ConfigError(f"{doc.origin or 'a document'}: its id holds personal data; pass id_key to redact_document (run_index uses the store's key)")
        doc_id = redact_id(doc.id, doc_id, id_key)

    meta = {k: (red(v) if isinstance(v, str) else [red(x) if isinstance(x, str) else x for x in v] if isinstance(v, list) else v)
            for k, v in doc.metadata.items()}
    return replace(doc, id=doc_id, text=red(doc.text), title=red(doc.title or ""), metadata=meta)
