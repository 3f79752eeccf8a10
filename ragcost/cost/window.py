"""Which ledger rows a report covers: ``--since`` as an ISO date/time or a span back from now."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Optional

from ragcost.errors import ConfigError

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_HINT = "use an ISO date/time (2026-11-30, 2026-11-30T12:00) or 30m/24h/7d/2w"


def parse_since(value: Optional[str], now: Optional[datetime] = None, option: str = "--since") -> Optional[datetime]:
    """An ISO date/time (UTC if no zone) or a span back from ``now``: ``30m``, ``24h``, ``7d``, ``2w``.

    Anything else, including a span reaching before year 1, is one ConfigError naming ``option``.
    """
    if not value:
        return None
    now = now or datetime.now(timezone.utc)
    text = value.strip()
    m = _RELATIVE.match(text)
    if m:
        try:
            return now - timedelta(**{_UNITS[m.group(2)]: float(m.group(1))})
        except (OverflowError, ValueError):
            raise ConfigError(f"{option} {value!r}: reaches back before year 1; give a shorter span (e.g. 52w) "
                              "or an ISO date (2026-11-30)") from None
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"{option} {value!r}: {_HINT}") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)
