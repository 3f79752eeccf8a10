"""JSON Schema for the YAML files, with each registered stage's own params."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import create_model

from ragcost.errors import ConfigError


def _stage_schemas() -> list[dict[str, Any]]:
    import ragcost.stages  # noqa: F401
    from ragcost.stages.base import stage_registry

    out = []
    for name in stage_registry.names():
        cls = stage_registry.get(name)
        model = create_model(f"{cls.__name__}Stage", __base__=cls.Params, type=(Literal[name], ...))  # type: ignore[call-overload]
        out.append(model.model_json_schema())
    return out


def json_schema(kind: str) -> dict[str, Any]:
    if kind == "pipeline":
        from ragcost.config.pipeline import PipelineConfig

        schema = PipelineConfig.model_json_schema()
        schema["properties"]["stages"]["items"] = {"oneOf": _stage_schemas()}
        return schema
    if kind == "index":
        from ragcost.config.index import IndexConfig

        return IndexConfig.model_json_schema()
    if kind == "pricing":
        from ragcost.cost.pricebook import PriceBook

        return PriceBook.model_json_schema()
    raise ConfigError(f"unknown schema kind {kind!r}; use pipeline, index or pricing")
