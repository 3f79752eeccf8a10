"""Guard checks (pii, prompt_injection, grounded, budget), registered by name on import."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from ragcost.guards import budget as _budget  # noqa: F401
from ragcost.guards import grounded as _grounded  # noqa: F401
from ragcost.guards import injection as _injection  # noqa: F401
from ragcost.guards import pii as _pii  # noqa: F401
from ragcost.guards.base import Finding, Guard, GuardParams, guard_registry
from ragcost.errors import ConfigError

__all__ = ["Finding", "Guard", "GuardParams", "guard_registry", "redact_document", "redact_document_text", "redacting_checks"]


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


def redact_document(doc, checks: Iterable[str] = ("pii",)):
    """A SourceDocument with title, text and string metadata redacted (so content hashes follow)."""
    guards = redacting_checks(checks)

    def red(t):
        for g in guards:
            t = g.redact(t)
        return t

    meta = {k: (red(v) if isinstance(v, str) else [red(x) if isinstance(x, str) else x for x in v] if isinstance(v, list) else v)
            for k, v in doc.metadata.items()}
    return replace(doc, text=red(doc.text), title=red(doc.title or ""), metadata=meta)
