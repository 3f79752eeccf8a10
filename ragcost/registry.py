"""One registry per kind of component, keyed by a short name used in YAML; plugins by entry point.

Every backend registers itself the same way, built-ins included: a module decorates its class
with ``<kind>_registry.register("name")`` and the kind's package imports its built-in modules.
A backend shipped in another package registers through the ``ragcost.backends`` entry-point
group (as llm's and pytest's plugins do)::

    [project.entry-points."ragcost.backends"]
    my_index = "my_package.ragcost_plugin"     # a module whose import registers its classes

Entry points load once, on the first lookup of any registry. One that fails to import is
reported on stderr with its name and the error, and never breaks the built-ins.
"""

from __future__ import annotations

import sys
from typing import Callable, Generic, Optional, TypeVar

from ragcost.errors import UnknownNameError

T = TypeVar("T")
ENTRY_POINT_GROUP = "ragcost.backends"
_PLUGINS: dict[str, Optional[str]] = {}  # entry point name -> None when loaded, else the error
_LOADING = [False]
_FROM: list[Optional[str]] = [None]  # the entry point whose module is importing now (what it registers is its)
REGISTRIES: list["Registry"] = []  # every registry, in the order their modules made them (``ragcost backends``)


def load_plugins(group: str = ENTRY_POINT_GROUP) -> dict[str, Optional[str]]:
    """Import every plugin of ``group`` once; returns name -> error (None when it loaded)."""
    if _PLUGINS or _LOADING[0]:
        return _PLUGINS
    _LOADING[0] = True
    try:
        from importlib.metadata import entry_points

        for ep in entry_points(group=group):
            _FROM[0] = f"{ep.name} ({ep.value})"
            try:
                obj = ep.load()
                if callable(obj) and not isinstance(obj, type):
                    obj()  # a register() function rather than a module
                _PLUGINS[ep.name] = None
            except Exception as e:  # a broken plugin must not break the built-ins
                msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                _PLUGINS[ep.name] = msg
                print(f"warning: ragcost plugin {ep.name!r} ({ep.value}) failed to load: {msg}; "
                      "the built-in backends still work; fix or uninstall the plugin", file=sys.stderr)
    finally:
        _LOADING[0] = False
        _FROM[0] = None
    return _PLUGINS


def plugin_errors() -> dict[str, str]:
    """The plugins that failed to load: entry point name -> the error (their warning's text)."""
    load_plugins()
    return {name: err for name, err in _PLUGINS.items() if err is not None}


class Registry(Generic[T]):
    """Maps short names (``"hnswlib"``, ``"retrieve"``) to classes of one kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._plugin: dict[str, Optional[str]] = {}  # name -> the entry point that registered it (None: imported)
        REGISTRIES.append(self)

    def register(self, name: str, *, replace: bool = False) -> Callable[[T], T]:
        """Decorator: ``@registry.register("name")``. ``replace=True`` lets a test or plugin override."""
        def deco(obj: T) -> T:
            if name in self._items and self._items[name] is not obj and not replace:
                raise ValueError(f"{self.kind} {name!r} is registered twice ({self._items[name]!r} and {obj!r})")
            self._items[name] = obj
            self._plugin[name] = _FROM[0]
            return obj

        return deco

    def unregister(self, name: str) -> None:
        self._items.pop(name, None)

    def get(self, name: str) -> T:
        """The class registered as ``name``; an unknown name lists every installed one."""
        try:
            return self._items[name]
        except KeyError:
            pass
        load_plugins()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; installed: {self.known()}") from None

    def entries(self) -> list[tuple[str, str, Optional[str]]]:
        """(name, where the class or function is defined, the plugin entry point that registered it or None)."""
        load_plugins()
        out = []
        for name in sorted(self._items):
            obj = self._items[name]
            where = f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__name__)}"
            out.append((name, where, self._plugin.get(name)))
        return out

    def known(self) -> str:
        return ", ".join(self.names()) or "(none)"

    def names(self) -> list[str]:
        load_plugins()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        if name not in self._items:
            load_plugins()
        return name in self._items
