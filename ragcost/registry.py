"""One registry per kind of component, keyed by a short name used in YAML."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

from ragcost.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps short names (``"hnswlib"``, ``"retrieve"``) to classes of one kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "(none)"
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; known: {known}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items
