"""``ragcost backends``: every registry's entries (built-in and plugin), where each is defined, and the plugins
that failed to load, as ``llm plugins`` lists llm's."""

from __future__ import annotations

import importlib
from typing import Any

import typer

# The modules whose import registers the built-in backends of each kind (none imports a heavy library at import).
BUILT_IN = ("ragcost.stages", "ragcost.index", "ragcost.embed", "ragcost.ingest.readers", "ragcost.generate",
            "ragcost.guards", "ragcost.cache.backends", "ragcost.cache.redis_backend", "ragcost.store")


def listing() -> dict[str, Any]:
    """{"registries": [{"kind", "entries": [{"name", "defined_in", "plugin"}]}], "plugin_errors": {name: error}}."""
    from ragcost.registry import REGISTRIES, plugin_errors

    for module in BUILT_IN:
        try:
            importlib.import_module(module)
        except ImportError:  # an optional extra that is not installed (redis): its backend is not there
            pass
    kinds = []
    for reg in REGISTRIES:
        kinds.append({"kind": reg.kind, "entries": [{"name": n, "defined_in": where, "plugin": plugin}
                                                    for n, where, plugin in reg.entries()]})
    return {"registries": kinds, "plugin_errors": plugin_errors()}


def backends(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List every backend each registry knows (index backends, embedders, stages, re-rankers, routers, guards,
    generators, stores, cache backends, readers), where each is defined, and the plugins that failed to load."""
    data = listing()
    if json_:
        from ragcost.cli.text import dumps

        typer.echo(dumps(data))
        return
    for reg in data["registries"]:
        typer.echo(f"{reg['kind']}:")
        for e in reg["entries"]:
            src = f"plugin {e['plugin']}" if e["plugin"] else "built-in" if e["defined_in"].startswith("ragcost.") else "imported"
            typer.echo(f"  {e['name']:<24} {src:<10} {e['defined_in']}")
    errors = data["plugin_errors"]
    typer.echo(f"plugins that failed to load: {len(errors) or 'none'}")
    for name, err in errors.items():
        typer.echo(f"  {name}: {err}")
