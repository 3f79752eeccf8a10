"""Declared, typed metadata fields: ``{tenant: str, year: int, tags: "list[str]"}``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SCALAR_TYPES = ("str", "int", "float", "bool")
FIELD_TYPES = SCALAR_TYPES + tuple(f"list[{t}]" for t in SCALAR_TYPES)
RESERVED = ("id", "title", "text")


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
                raise ValueError(f"field {self.name!r} is {self.spec}; got {type(value).__name__} {value!r}")
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
            raise ValueError(f"field {self.name!r} is {self.spec}; got {type(v).__name__} {v!r}")
        return float(v) if self.base == "float" else v


def parse_fields(spec: dict[str, str]) -> dict[str, FieldType]:
    return {name: FieldType.parse(name, t) for name, t in spec.items()}
