"""--since: ISO or a span back from now; anything else is one line, never an unexpected error."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from ragcost.cost.window import parse_since
from ragcost.errors import ConfigError

NOW = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)


class TestParseSince:
    def test_relative_and_iso(self):
        assert parse_since("24h", NOW) == datetime(2026, 11, 29, 12, tzinfo=timezone.utc)
        assert parse_since("1.5d", NOW) == datetime(2026, 11, 29, 0, tzinfo=timezone.utc)
        assert parse_since("2026-11-01", NOW) == datetime(2026, 11, 1, tzinfo=timezone.utc)
        assert parse_since(None, NOW) is None and parse_since("", NOW) is None

    @pytest.mark.parametrize("value", ["99999999999w", "9999999999999999999999d", "1e9w"])
    def test_a_huge_span_is_one_config_error_not_an_overflow(self, value):
        with pytest.raises(ConfigError, match=rf"^--since '{value}': "):
            parse_since(value, NOW)

    def test_garbage_names_the_option_and_the_forms(self):
        with pytest.raises(ConfigError, match=r"^--since 'yesterday': use an ISO date/time .* or 30m/24h/7d/2w$"):
            parse_since("yesterday", NOW)
