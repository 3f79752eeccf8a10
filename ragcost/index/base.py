"""The VectorIndex protocol: build once, search at many settings; each backend describes itself.

Vectors are float32, L2-normalised, so inner product is cosine similarity; labels are
int64 chunk ids from the store. Scores are similarities: higher is better. Missing
results (fewer than k found) are label -1 with score -inf.

A backend class declares what the config may ask of it: its ``kinds`` (each with its build and
search parameter models and the precisions it stores), the ``devices`` it runs on, the
``suffix`` of its saved file, how it widens a filtered search (``filtered_search_params``) and
which of its kinds may be held in shards (``shardable``).
The config layer knows none of this; ``ragcost.index.check_config`` checks a config against it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, NamedTuple, Optional

import numpy as np
from pydantic import ValidationError

from ragcost.config.base import Strict, first_loc, one_line
from ragcost.config.index import IndexConfig
from ragcost.errors import ConfigError
from ragcost.index.params import raised_ef, raised_nprobe
from ragcost.registry import Registry

PRECISIONS = ("float32", "float16", "int8", "binary")


@dataclass(frozen=True)
class KindSpec:
    """One index structure a backend offers: its parameter models, the precisions it stores, and what the
    cost model needs to price and plan it without knowing the backend.

    ``holds_float32``: at precision float32 the index itself stores every vector in full (then the
    float32 exact-scan copy beside it adds no RAM). ``size``: bytes of the structure over ``n`` vectors,
    called as ``size(n, dim, precision, M=..., pq_m=..., nbits=...)`` with ``plan``'s options (a formula
    ignores what it does not use: ``**_``); None: ``plan`` cannot estimate this kind and says so
    (formulas for the built-ins: :mod:`ragcost.index.sizes`); ``size_source``: what checks it."""

    build: type[Strict]
    search: type[Strict]
    precisions: tuple[str, ...] = ("float32",)
    precision_note: str = ""  # why other precisions are refused, and the fix
    holds_float32: bool = False
    size: Optional[Callable[..., float]] = None
    size_source: str = ""  # what checks ``size`` against built indexes (plan prints it), e.g. "bench.plan_ram"


class FilteredResult(NamedTuple):
    """A filtered search: (q, k) scores and labels, and the query rows the backend scored exactly
    (its own fallback when the filtered walk came up short), as sorted int64 row positions."""

    scores: np.ndarray
    labels: np.ndarray
    exact_rows: np.ndarray


NO_ROWS = np.empty(0, dtype=np.int64)


def field_error(message: str, field: tuple) -> ConfigError:
    """A ConfigError that says which key of the index config is wrong (the loader positions it)."""
    err = ConfigError(message)
    err.field = field
    return err


class VectorIndex(ABC):
    """A thin wrapper over one ANN library. The runner times it; it never times itself."""

    backend: ClassVar[str]
    kinds: ClassVar[dict[str, KindSpec]]
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    suffix: ClassVar[str] = "index"  # the saved file is index-<build id>.<suffix>
    store_schemes: ClassVar[tuple[str, ...]] = ()  # a backend living in the store's database names its kinds
    shardable: ClassVar[tuple[str, ...]] = ()  # kinds ``ragcost.index.sharded`` may hold as N graphs searched together
    # Kinds a cluster builds by training once and adding shards on workers (``executor: ray``): such a
    # backend implements :meth:`trained_for_shards`, :meth:`add_shard` and :meth:`adopt_shards`.
    trained_shards: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: IndexConfig, dim: int, precision: str = "float32") -> None:
        self.config = self.checked(config, precision)
        self.dim = dim
        self.precision = precision
        self.warnings: list[str] = []  # build-time notes for the user (e.g. too few points to train PQ)

    # ---- what the config may ask --------------------------------------------------------
    @classmethod
    def checked(cls, config: IndexConfig, precision: Optional[str] = None) -> IndexConfig:
        """``config`` with build/search normalised (defaults filled in); a ConfigError with ``.field`` else."""
        spec = cls.kinds.get(config.kind)
        if spec is None:
            raise field_error(f"kind: backend {cls.backend!r} has no kind {config.kind!r}; "
                              f"use one of {', '.join(cls.kinds)}{cls._other_backends(config.kind)}", ("kind",))
        if config.device not in cls.devices:
            raise field_error(f"device: {config.device}: backend {cls.backend!r} runs on "
                              f"{', '.join(cls.devices)} only; use device: {cls.devices[0]}", ("device",))
        if precision is not None:
            cls._check_precision(config.kind, spec, precision)
        # In place as well as returned: the config's build dict is part of the artifact's fingerprint.
        config.build = _normalised(spec.build, config.build, "build", config.kind)
        config.search = _normalised(spec.search, config.search, "search", config.kind)
        return config

    @classmethod
    def _check_precision(cls, kind: str, spec: KindSpec, precision: str) -> None:
        if precision not in PRECISIONS:
            raise field_error(f"precision {precision!r} is unknown; use one of {', '.join(PRECISIONS)}", ("kind",))
        if precision in spec.precisions:
            return
        note = spec.precision_note or f"backend {cls.backend} kind {kind} stores {', '.join(spec.precisions)}"
        field = ("backend",) if all(precision not in s.precisions for s in cls.kinds.values()) else ("kind",)
        raise field_error(f"index: kind {kind} with precision {precision}: {note}", field)

    @classmethod
    def _other_backends(cls, kind: str) -> str:
        others = [n for n in index_registry.names()
                  if n != cls.backend and kind in getattr(index_registry.get(n), "kinds", {})]
        return f" or backend: {others[0]}" if others else ""

    # ---- built on a cluster in shards (only for ``trained_shards`` kinds) -----------------------
    def builds_in_shards(self) -> bool:
        """Whether ``executor: ray`` builds this index by training once and adding shards on workers."""
        return self.config.kind in self.trained_shards

    def trained_for_shards(self, vectors: np.ndarray) -> tuple[bytes, int]:
        """(the empty index trained on a sample of ``vectors``, serialised; the sample's size): what each worker
        adds its shard to."""
        raise NotImplementedError(f"backend {self.backend} declares no kinds built in trained shards")

    @staticmethod
    def add_shard(trained: bytes, vectors: np.ndarray, labels: np.ndarray) -> bytes:
        """Run on a worker: ``trained`` with this shard's vectors added under their labels, serialised."""
        raise NotImplementedError

    def adopt_shards(self, trained: bytes, parts: list[bytes]) -> int:
        """Merge the workers' shards into ``trained`` and hold the result (as :meth:`load` would); its vector count."""
        raise NotImplementedError(f"backend {self.backend} declares no kinds built in trained shards")

    def build_params(self) -> Any:
        """The typed build parameters of this index's kind."""
        return self.kinds[self.config.kind].build.model_validate(self.config.build)

    def search_params(self, overrides: Optional[dict[str, Any]] = None) -> Any:
        """The typed search parameters, with per-call ``overrides`` (ef, nprobe) checked."""
        return typed_search(self.kinds[self.config.kind].search, self.config, overrides)

    @classmethod
    def filtered_search_params(cls, config: IndexConfig, k: int, selectivity: float) -> Optional[dict[str, Any]]:
        """Search overrides for a filtered search where ``selectivity`` of the labels are allowed,
        or None to search as configured. The default widens ``ef`` or ``nprobe`` when the kind has it."""
        fields = cls.kinds[config.kind].search.model_fields
        if "ef" in fields:
            return raised_ef(int(config.search.get("ef", fields["ef"].default)), k, selectivity)
        if "nprobe" in fields:
            return raised_nprobe(int(config.search.get("nprobe", fields["nprobe"].default)), selectivity)
        return None

    # ---- the work -------------------------------------------------------------------------
    @abstractmethod
    def build(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        """Build from (n, dim) float32 vectors and their (n,) int64 labels."""

    @abstractmethod
    def search(
        self,
        queries: np.ndarray,
        k: int,
        params: dict[str, Any] | None = None,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k for (q, dim) float32 queries -> (scores (q, k) float32, labels (q, k) int64).

        ``params`` overrides the config's search parameters for this call (ef, nprobe).
        ``allowed`` (sorted int64 labels) restricts results to those labels using the
        library's own filtered search (hnswlib ``filter``; faiss ``IDSelector`` in
        ``SearchParameters``) -- never post-filtering.
        """

    def search_filtered(
        self, queries: np.ndarray, k: int, params: dict[str, Any] | None, allowed: np.ndarray
    ) -> FilteredResult:
        """``search`` restricted to ``allowed``, saying which query rows were scored exactly rather
        than by the index. A backend that falls back to exact scoring overrides this; by default none do."""
        scores, labels = self.search(queries, k, params=params, allowed=allowed)
        return FilteredResult(scores, labels, NO_ROWS)

    def search_one(self, query: np.ndarray, k: int) -> tuple[list[int], list[float]]:
        """Top-k for one (dim,) float32 query with the config's search parameters, as Python lists
        (labels, scores); missing results are -1 / -inf. Backends override it with a path that
        skips the batch bookkeeping: a single query is where per-call overhead shows."""
        scores, labels = self.search(np.asarray(query, dtype=np.float32).reshape(1, -1), k)
        return labels[0].tolist(), scores[0].tolist()

    @abstractmethod
    def save(self, path: Path) -> None:
        """Write the index to ``path`` (one file)."""

    @abstractmethod
    def load(self, path: Path) -> None:
        """Read an index written by ``save``."""

    @abstractmethod
    def nbytes(self) -> int:
        """Bytes the index holds in memory (vectors/codes plus graph or lists)."""

    @abstractmethod
    def __len__(self) -> int: ...


def typed_search(model: type[Strict], config: IndexConfig, overrides: Optional[dict[str, Any]] = None) -> Any:
    """``config.search`` with ``overrides`` as ``model``; a ConfigError names the bad override."""
    try:
        return model.model_validate({**config.search, **(overrides or {})})
    except ValidationError as e:
        raise ConfigError(f"search params {overrides!r} for kind {config.kind!r}: "
                          f"{one_line(e, known=list(model.model_fields))}") from None


def _normalised(model: type[Strict], data: dict, where: str, kind: str) -> dict:
    """``data`` validated by ``model`` with its defaults filled in; the error names the key."""
    try:
        return model.model_validate(data).model_dump()
    except ValidationError as e:
        msg = one_line(e, prefix=(where,), known=list(model.model_fields) or ["none"],
                       unknown=f"unknown {where} parameter for kind {kind!r}")
        raise field_error(msg, (where, *first_loc(e))) from None


index_registry: Registry[type[VectorIndex]] = Registry("index backend")
