"""Declared, typed metadata fields: ``{tenant: str, year: int, tags: "list[str]"}``."""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass
from typing import Any

SCALAR_TYPES = ("str", "int", "float", "bool")
FIELD_TYPES = SCALAR_TYPES + tuple(f"list[{t}]" for t in SCALAR_TYPES)
RESERVED = ("id", "title", "text")
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # int fields are 64-bit in every store


class OutOfRange(ValueError):
    """A value of the right type that no store can hold (an int beyond 64 bits, NaN, Infinity)."""


class _Short(reprlib.Repr):
    def __init__(self) -> None:
        super().__init__()
        self.maxstring, self.maxother, self.maxlong, self.maxlist, self.maxdict, self.maxlevel = 60, 60, 30, 4, 4, 2

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 4000:  # beyond Python's int -> str digit limit
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_SHORT = _Short()


def short_repr(value: Any) -> str:
    """A repr for one-line messages: truncated strings, lists and huge ints; never raises."""
    try:
        return _SHORT.repr(value)
    except Exception:  # noqa: BLE001  (a message must never fail to format)
        return f"<{type(value).__name__}>"


@dataclass(frozen=True)
class FieldType:
    name: str
    base: str  # str | int | float | bool
    is_list: bool = False

    @classmethod
    def parse(cls, name: str, spec: str) -> "FieldType":
        if not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"metadata field {name!r}: names must be identifiers not starting with '_'")
        if name in RESERVED:
            raise ValueError(f"metadata field {name!r} is reserved (id, title, text are built in); rename it")
        spec = str(spec).replace(" ", "")
        if spec not in FIELD_TYPES:
            raise ValueError(f"metadata field {name!r}: unknown type {spec!r}; use one of {', '.join(FIELD_TYPES)}")
        if spec.startswith("list["):
            return cls(name, spec[5:-1], True)
        return cls(name, spec, False)

    @property
    def spec(self) -> str:
        return f"list[{self.base}]" if self.is_list else self.base

    def check(self, value: Any) -> Any:
        """A value of this field's type (ints accepted for float), or ValueError saying what was wrong."""
        if value is None:
            return None
        if self.is_list:
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"field {self.name!r} is {self.spec}; got {type(value).__name__} {short_repr(value)}")
            return [self._scalar(v) for v in value]
        return self._scalar(value)

    def _scalar(self, v: Any) -> Any:
        ok = {
            "str": isinstance(v, str),
            "int": isinstance(v, int) and not isinstance(v, bool),
            "float": isinstance(v, (int, float)) and not isinstance(v, bool),
            "bool": isinstance(v, bool),
        }[self.base]
        if not ok:
            raise ValueError(f"field {self.name!r} is {self.spec}; got {type(v).__name__} {short_repr(v)}")
        if self.base == "int" and not INT_MIN <= v <= INT_MAX:
            raise OutOfRange(f"field {self.name!r} is {self.spec} (64-bit); {short_repr(v)} is outside "
                             "-2**63..2**63-1; use a float field or a smaller value")
        if self.base == "float":
            return self._finite(v)
        if self.base == "str":
            _storable_text(self.name, v)
        return v

    def _finite(self, v: Any) -> float:
        try:
            x = float(v)
        except OverflowError:
            x = math.inf
        if not math.isfinite(x):
            raise OutOfRange(f"field {self.name!r} is {self.spec}; {short_repr(v)} is not a finite float "
                             "(NaN, Infinity and numbers beyond 1.8e308 cannot be stored or compared); use null for a missing value")
        return x


def _storable_text(name: str, v: str) -> None:
    """Text every store can hold: valid UTF-8 (no lone surrogate) and no NUL byte (PostgreSQL refuses it)."""
    if "\x00" in v:
        raise OutOfRange(f"field {name!r}: {short_repr(v)} holds a NUL (0x00) byte, which stores cannot hold; remove it")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise OutOfRange(f"field {name!r}: {short_repr(v)} holds a lone surrogate (not valid Unicode); "
                         "fix the source's encoding") from None


def parse_fields(spec: dict[str, str]) -> dict[str, FieldType]:
    return {name: FieldType.parse(name, t) for name, t in spec.items()}
