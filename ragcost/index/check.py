"""An index config checked against the backend it names, and its typed parameters."""

from __future__ import annotations

from typing import Any, Optional

from ragcost.config import index as config_index
from ragcost.config.index import IndexConfig
from ragcost.errors import UnknownNameError
from ragcost.index.base import KindSpec, VectorIndex, index_registry, typed_search


def backend_class(config: IndexConfig) -> type[VectorIndex]:
    """The registered backend class; an unknown name lists the installed ones (``.field`` = ("backend",))."""
    try:
        return index_registry.get(config.backend)
    except UnknownNameError as e:
        e.field = ("backend",)
        raise


def check_config(config: IndexConfig, precision: Optional[str] = None) -> IndexConfig:
    """``config`` checked against its backend: kind, build/search params (normalised with their
    defaults, in place), device and, when given, precision. A ConfigError carries ``.field``, the
    key path inside the index config, so a loader can say file:line:col."""
    return backend_class(config).checked(config, precision)


def _spec(config: IndexConfig) -> KindSpec:
    cls = backend_class(config)
    cls.checked(config)
    return cls.kinds[config.kind]


def build_params(config: IndexConfig) -> Any:
    """The typed build parameters of the config's kind (e.g. ``HNSWBuild``)."""
    return _spec(config).build.model_validate(config.build)


def search_params(config: IndexConfig, **overrides: Any) -> Any:
    """The typed search parameters of the config's kind, with ``overrides``; a ConfigError names a bad one."""
    return typed_search(_spec(config).search, config, overrides)


def _raw_search_params(config: IndexConfig, **overrides: Any) -> Any:
    # IndexConfig.search_params raised pydantic's ValidationError; its transitional callers read .errors().
    return _spec(config).search.model_validate({**config.search, **overrides})


config_index.PARAM_ACCESSORS.update(build_params=build_params, search_params=_raw_search_params)
