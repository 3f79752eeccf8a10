"""Load a pipeline YAML into live parts, and run batches of queries through its stages.

The runner measures (wall seconds, calls, items per stage call); stages report only what
they alone know; dollars come from ragcost.cost.compute and the price book.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
import uuid
from time import perf_counter
from typing import Any, Optional

from ragcost.config.index import IndexConfig
from ragcost.config.loader import read_yaml, validate
from ragcost.config.pipeline import PipelineConfig, stage_params
from ragcost.cost.usage import UsageRecord
from ragcost.errors import ConfigError, RagcostError, StageError
from ragcost.stages.base import QueryState, Stage, stage_registry


def _resolve(base: Path, rel: str) -> Optional[Path]:
    """A path relative to the pipeline file's folder, else to the working directory."""
    for cand in (base / rel, Path(rel)):
        if cand.exists():
            return cand
    return None


@dataclass
class StageCall:
    record: UsageRecord
    cost_usd: float
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    query: Optional[QueryState] = None  # set when the call served one query only (a generate attempt)
    served: list[QueryState] = field(default_factory=list)  # the queries a batch call served

    def serves(self, s: QueryState) -> bool:
        """Whether this call's cost is (partly) this query's: guards may stop a query mid-pipeline."""
        if self.query is not None:
            return self.query is s
        return any(x is s for x in self.served)


@dataclass
class RunResult:
    states: list[QueryState]
    calls: list[StageCall] = field(default_factory=list)
    storage_usd_per_query: float = 0.0

    @property
    def total_usd(self) -> float:
        return sum(c.cost_usd for c in self.calls) + self.storage_usd_per_query * len(self.states)


class Pipeline:
    """A validated pipeline and the parts it needs; heavy parts load on first use."""

    def __init__(self, config: PipelineConfig, path: Path, index_config: IndexConfig, raw: Any = None) -> None:
        self.config = config
        self.path = path
        self.base = path.parent
        self.index_config = index_config
        self.raw = raw
        self._stages: Optional[list[Stage]] = None
        self._store = None
        self._artifact = None

    # ---- loading -------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "Pipeline":
        import ragcost.stages  # noqa: F401  (registers built-in stages)

        p = Path(path)
        raw = read_yaml(p)
        if raw is None:
            raise ConfigError(f"{p}: the file is empty; see pipelines/quickstart.yaml for an example")
        config = validate(PipelineConfig, raw, str(p))
        if isinstance(config.index, str):
            ipath = _resolve(p.parent, config.index)
            if ipath is None:
                raise ConfigError(f"{p}: index: file {config.index!r} not found (looked beside the pipeline and in {Path.cwd()})")
            from ragcost.config.loader import load_model

            index_config = load_model(IndexConfig, ipath)
        else:
            index_config = config.index
        if config.embed.precision != "float32" and index_config.backend == "hnswlib":
            raise ConfigError(
                f"{p}: embed.precision {config.embed.precision!r}: hnswlib stores float32 only; "
                "use an index with backend: faiss for float16/int8/binary"
            )
        pipe = cls(config, p, index_config, raw)
        pipe._validate_stages()
        return pipe

    def _validate_stages(self) -> None:
        self._stage_specs = []
        for i, st in enumerate(self.config.stages):
            try:
                stage_cls = stage_registry.get(st.type)
            except ConfigError as e:
                from ragcost.config.loader import position

                pos = position(self.raw, ["stages", i, "type"])
                where = f"{self.path}:{pos[0]}:{pos[1]}" if pos else str(self.path)
                raise ConfigError(f"{where}: stages.{i}.type: {e}") from None
            params = validate(stage_cls.Params, stage_params(st), str(self.path), prefix=("stages", i), tree=self.raw)
            self._stage_specs.append((stage_cls, params))

    @cached_property
    def price_book_path(self) -> Path:
        p = _resolve(self.base, self.config.pricing)
        if p is None:
            raise ConfigError(f"{self.path}: pricing: file {self.config.pricing!r} not found (looked beside the pipeline and in {Path.cwd()})")
        return p

    @cached_property
    def price_book(self):
        from ragcost.cost.pricebook import load_price_book

        return load_price_book(self.price_book_path)

    def resource_refs(self) -> dict[str, str]:
        """Price-book resources this pipeline names, with where it names them (for validation)."""
        from ragcost.config.loader import position

        refs: dict[str, str] = {}

        def where(loc: list) -> str:
            pos = position(self.raw, loc)
            return f"{self.path}:{pos[0]}:{pos[1]}" if pos else str(self.path)

        refs.setdefault(self.config.resource, where(["resource"]))
        if self.config.embed.resource:
            refs.setdefault(self.config.embed.resource, where(["embed", "resource"]))
        for i, (_, params) in enumerate(self._stage_specs):
            if params.resource:
                refs.setdefault(params.resource, where(["stages", i, "resource"]))
        return refs

    def check(self) -> None:
        """Everything `ragcost validate` checks without running: files, price book, resources."""
        from ragcost.cost.pricebook import check_resources

        check_resources(self.price_book, self.resource_refs())
        src = self.config.source_config
        if src.path and _resolve(self.base, src.path) is None:
            raise ConfigError(f"{self.path}: source: {src.path!r} not found; fix the path or pass --source")

    # ---- parts ---------------------------------------------------------------------------
    @cached_property
    def embedder(self):
        from ragcost.embed import make_embedder

        return make_embedder(self.config.embed, base=self.base)

    @property
    def dim(self) -> int:
        return self.config.embed.dim or self.embedder.native_dim

    def store(self):
        if self._store is None:
            from ragcost.store.store import Store

            self._store = Store(self.config.store_url, self.config.name, self.config.fields).open()
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def rebuild_hint(self) -> str:
        return f"run `ragcost index {self.path}` to rebuild"

    def index_fingerprint(self, corpus_revision: str) -> dict[str, Any]:
        """What makes the index: model bytes, dim, precision, build parameters, corpus revision."""
        if self.config.embed.dim and self.config.embed.dim > self.embedder.native_dim:
            raise ConfigError(
                f"{self.path}: embed.dim {self.config.embed.dim} is larger than the model's {self.embedder.native_dim}; "
                f"use a dim <= {self.embedder.native_dim}"
            )
        return {
            "model": self.config.embed.model,
            "model_fingerprint": self.embedder.fingerprint(),
            "dim": self.dim,
            "precision": self.config.embed.precision,
            "normalize": True,
            "backend": self.index_config.backend,
            "kind": self.index_config.kind,
            "build": self.index_config.build,
            "corpus_revision": corpus_revision,
        }

    def artifact(self):
        """The built index, refused when anything that made it differs from what the pipeline says now."""
        if self._artifact is None:
            from ragcost.index.artifact import open_artifact

            expected = self.index_fingerprint(self.store().revision())
            self._artifact = open_artifact(self.config.index_path, self.index_config, expected, self.rebuild_hint())
        return self._artifact

    def stages(self) -> list[Stage]:
        if self._stages is None:
            from ragcost.stages.embed import EmbedQueries

            stages: list[Stage] = [EmbedQueries(EmbedQueries.Params(resource=self.config.embed.resource), self)]
            stages += [cls(params, self) for cls, params in self._stage_specs]
            self._stages = stages
        return self._stages

    def warm_up(self) -> None:
        for s in self.stages():
            s.warm_up()

    # ---- running -------------------------------------------------------------------------
    def run(self, states: list[QueryState]) -> RunResult:
        """Run one batch through every stage; time each call; price it from the book."""
        from ragcost.cost.compute import cost_of

        book = self.price_book
        result = RunResult(states=states)
        batch = states
        for stage in self.stages():
            active = [s for s in batch if s.error is None]
            if not active:
                break
            rec = UsageRecord(stage=stage.name, resource=stage.resource, items=len(active))
            t0 = perf_counter()
            try:
                stage.run(active, rec)
            except RagcostError:
                raise
            except Exception as e:  # a stage bug or a library failure: recorded, named, and raised
                rec.wall_seconds = perf_counter() - t0
                rec.failures += 1
                result.calls.append(StageCall(rec, cost_of(rec, book), served=active))
                raise StageError(f"stage {stage.name!r} failed: {type(e).__name__}: {e}") from e
            rec.wall_seconds = perf_counter() - t0
            # A stage may report one record per attempt, each for one query (generate: retries,
            # fallbacks); they replace the call's own record. Attempts sharing a busy period share a call_id.
            attempts = rec.notes.pop("attempts", None)
            for state, a in attempts or []:
                result.calls.append(StageCall(a, cost_of(a, book), a.notes.pop("call_id", None) or uuid.uuid4().hex, state))
            if not attempts:
                result.calls.append(StageCall(rec, cost_of(rec, book), served=active))
        result.storage_usd_per_query = self.storage_usd_per_query()
        return result

    def storage_bytes(self) -> tuple[int, int]:
        """(RAM, disk) bytes the index holds: the index plus the float32 exact-scan copy kept beside it."""
        m = self.artifact().manifest
        return m.index_bytes + m.vector_count * m.dim * 4, m.file_bytes

    def storage_usd_per_query(self) -> float:
        from ragcost.cost.compute import storage_cost_per_query

        return storage_cost_per_query(*self.storage_bytes(), self.price_book)
