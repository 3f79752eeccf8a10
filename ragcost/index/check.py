"""An index config checked against the backend it names, and its typed parameters."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ragcost.config.index import IndexConfig
from ragcost.errors import ConfigError, UnknownNameError
from ragcost.index.base import KindSpec, VectorIndex, index_registry, typed_search
from ragcost.index.sharded import check_shards


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
    key path inside the index config, so a loader can say file:line:col. ``shards`` > 1 needs an hnsw kind."""
    config = backend_class(config).checked(config, precision)
    check_shards(config)
    return config


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


def load_index_file(path: str | Path, precision: Optional[str] = None) -> IndexConfig:
    """An index YAML file, validated and checked against its backend; errors name file:line:col."""
    from ragcost.config.base import position
    from ragcost.config.loader import load_model, read_yaml

    config = load_model(IndexConfig, path)
    try:
        return check_config(config, precision)
    except ConfigError as e:
        pos = position(read_yaml(path), list(getattr(e, "field", None) or ()))
        where = f"{path}:{pos[0]}:{pos[1]}" if pos else str(path)
        err = type(e)(f"{where}: {e}")
        err.field = getattr(e, "field", None)
        raise err from None


# The backend a kind means when only the kind is named (``plan --kind``): the pipeline schema's default
# backend for HNSW, faiss for the others.
DEFAULT_BACKEND = {"hnsw": "hnswlib"}


def kind_spec(backend: Optional[str], kind: str) -> KindSpec:
    """What ``backend`` declares for ``kind`` (a plugin's too); ``backend`` None: the default for the kind.
    A ConfigError names the installed backends or the backend's kinds."""
    name = backend or DEFAULT_BACKEND.get(kind, "faiss")
    cls = index_registry.get(name)  # UnknownNameError (a ConfigError) lists the installed ones
    spec = cls.kinds.get(kind)
    if spec is None:
        raise ConfigError(f"index backend {name!r} has no kind {kind!r}; use one of {', '.join(cls.kinds)}")
    return spec


def holds_float32(backend: str, kind: str, precision: str) -> bool:
    """Whether the index itself stores every vector at float32 (then the exact-scan copy adds no RAM): its
    backend's declaration (:attr:`KindSpec.holds_float32`). An unknown backend or kind is assumed not to
    (the copy is counted: the dearer side)."""
    if precision != "float32":
        return False
    try:
        return kind_spec(backend, kind).holds_float32
    except ConfigError:
        return False
