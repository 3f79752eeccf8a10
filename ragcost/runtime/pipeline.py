"""A loaded pipeline: its parts (the StageContext stages get), its stages, and the runner over them."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, Optional

from ragcost.config.index import IndexConfig
from ragcost.config.pipeline import DEFAULT_PRICING, PipelineConfig
from ragcost.cost.pricebook import PriceBook
from ragcost.errors import ConfigError
from ragcost.records import QueryState
from ragcost.runtime.load import LoadedPipeline, load_pipeline, resolve
from ragcost.runtime.pipeline_checks import PipelineChecks
from ragcost.runtime.pipeline_storage import PipelineStorage
from ragcost.runtime.runner import RunResult, Runner
from ragcost.stages.base import Stage


class Pipeline(PipelineChecks, PipelineStorage):
    """A validated pipeline and the parts it needs; heavy parts load on first use. What `validate` checks is
    :class:`~ragcost.runtime.pipeline_checks.PipelineChecks`; what it keeps, in bytes and dollars,
    :class:`~ragcost.runtime.pipeline_storage.PipelineStorage`.

    It implements :class:`~ragcost.context.StageContext` explicitly (path, base, resource, dim,
    index_config, index_dir, price_book, embedder, store(), artifact()): that is all a stage sees.
    """

    def __init__(self, loaded: LoadedPipeline) -> None:
        self.loaded = loaded
        self.config: PipelineConfig = loaded.config
        self.path: Path = loaded.path
        self.raw = loaded.raw
        self._index_config = loaded.index_config
        self._stages: Optional[list[Stage]] = None
        self._store: Any = None
        self._artifact: Any = None
        self._storage: Optional[tuple[int, int]] = None
        self._resident: Optional[tuple[float, Optional[int]]] = None
        self._shared: dict[str, Any] = {}

    @classmethod
    def load(cls, path: str | Path, judge: bool = True) -> "Pipeline":
        """``judge=False``: skip the useful-judge check (for eval, which judges by the qrels)."""
        return cls(load_pipeline(path, judge))

    # ---- StageContext ----------------------------------------------------------------------
    def stage_params(self) -> list[dict[str, Any]]:
        return [{"type": cls.type, **params.model_dump(mode="json")} for cls, params in self.loaded.stage_specs]

    def shared(self) -> dict[str, Any]:
        return self._shared

    @property
    def base(self) -> Path:
        return self.path.parent

    @property
    def resource(self) -> str:
        return self.config.resource

    @property
    def index_config(self) -> IndexConfig:
        return self._index_config

    @property
    def index_dir(self) -> Path:
        return self.config.index_path

    @cached_property
    def price_book_path(self) -> Path:
        p = resolve(self.base, self.config.pricing)
        if p is None and self.config.pricing == DEFAULT_PRICING:
            from ragcost.cost.pricebook import default_price_book_path

            return default_price_book_path()  # no pricing: key and no pricing/ folder: the book in the package
        if p is None:
            raise ConfigError(f"{self.loaded.where(['pricing'])}: pricing: file {self.config.pricing!r} not found "
                              f"(looked beside the pipeline and in {Path.cwd()})")
        return p

    @cached_property
    def price_book(self) -> PriceBook:
        from ragcost.cost.pricebook import load_price_book

        return load_price_book(self.price_book_path)

    @cached_property
    def embedder(self):
        from ragcost.embed import make_embedder

        return make_embedder(self.config.embed, base=self.base)

    @property
    def dim(self) -> int:
        return self.config.embed.dim or self.embedder.native_dim

    def store(self):
        if self._store is None:
            from ragcost.store import open_store

            self._store = open_store(self.config.store_url, self.config.name, self.config.fields)
        return self._store

    def artifact(self):
        """The built index, refused when anything that made it differs from what the pipeline says now."""
        if self._artifact is None:
            from ragcost.index.artifact import open_artifact

            expected = self.index_fingerprint(self.store().revision())
            if self.index_config.serve.on == "ray" and self.index_shards() > 1:
                self._artifact = self._served_on_ray(expected)
            else:
                self._artifact = open_artifact(self.config.index_path, self.index_config, expected, self.rebuild_hint())
        return self._artifact

    def _served_on_ray(self, expected: dict[str, Any]):
        """The artifact checked as ``open_artifact`` checks it, its shards loaded in Ray actors, not here."""
        import numpy as np

        from ragcost.index.artifact import LoadedIndex, check_artifact
        from ragcost.runtime.shard_actors import serve_on_ray

        d = self.config.index_path
        self._check_shard_resources()  # before any actor starts: a bad resource is one line, not a query error
        m = check_artifact(d, self.index_config, expected, self.rebuild_hint())
        art = LoadedIndex(index=None, labels=np.load(d / m.labels_file),  # type: ignore[arg-type]
                          vectors=np.load(d / m.vectors_file, mmap_mode="r"), manifest=m)
        serve = self.index_config.serve
        opts = self.config.ray_options.model_copy(update={
            "address": serve.address or self.config.ray_options.address, "connect_timeout_s": serve.connect_timeout_s})
        try:
            return serve_on_ray(art, d, self.index_config, opts)
        except ConfigError as e:
            if str(e).startswith("index.serve.nodes"):  # the node map named no node: say where it is
                raise ConfigError(f"{self.loaded.where(['index', 'serve', 'nodes'])}: {e}") from None
            raise

    @property
    def store_file(self) -> Optional[Path]:
        """The embedded (DuckDB) store's file, or None for a server store or an in-memory one."""
        from ragcost.urls import db_file

        return db_file(self.config.store_url, ("duckdb",))

    def check_index(self, deep: bool = False) -> Any:
        """What ``query`` would say about the built index, without loading it or writing anything: its
        manifest, or the error ``query`` would raise (no store, no index, stale fingerprint, damaged
        file). None when nothing was built yet (no manifest and no store file). The store is opened
        read-only for the corpus revision; ``deep`` re-hashes every index file."""
        from ragcost.errors import StoreError
        from ragcost.index.artifact import check_artifact
        from ragcost.index.manifest import MANIFEST
        from ragcost.store import open_store

        file = self.store_file
        built = (self.config.index_path / MANIFEST).exists()
        if not built and (file is None or not file.is_file()) and not deep:
            return None
        if file is not None and not file.is_file():
            from ragcost.runtime.load import no_store_message

            raise StoreError(no_store_message(file, self.path))
        store = open_store(self.config.store_url, self.config.name, self.config.fields, read_only=True)
        try:
            expected = self.index_fingerprint(store.revision())
        finally:
            store.close()
        return check_artifact(self.config.index_path, self.index_config, expected, self.rebuild_hint(), deep=deep)

    @cached_property
    def calibration(self):
        """The expected-useful judge's calibration (``useful: {judge: calibrated}``), checked against this pipeline."""
        from ragcost.runtime.judge import load_calibration

        return load_calibration(self)

    # ---- the rest of the pipeline ----------------------------------------------------------
    def close(self) -> None:
        for st in self._stages or []:
            st.close()
        close_index = getattr(getattr(self._artifact, "index", None), "close", None)
        if close_index is not None:  # shard actors on Ray
            close_index()
            self._artifact = None
        if self._store is not None:
            self._store.close()
            self._store = None

    def rebuild_hint(self) -> str:
        return f"run `ragcost index {self.path}` to rebuild"

    def check_dim(self) -> int:
        """The index dim, refused when larger than the model's (before anything is embedded)."""
        native = self.embedder.native_dim
        if self.config.embed.dim and self.config.embed.dim > native:
            raise ConfigError(f"{self.loaded.where(['embed', 'dim'])}: embed.dim {self.config.embed.dim} is larger "
                              f"than the model's {native}; use a dim <= {native}")
        return self.dim

    def index_fingerprint(self, corpus_revision: str) -> dict[str, Any]:
        """What makes the index: model bytes, dim, precision, build parameters, corpus revision."""
        self.check_dim()
        return {
            "model": self.config.embed.model,
            "model_fingerprint": self.embedder.fingerprint(),
            "dim": self.dim,
            "precision": self.config.embed.precision,
            "normalize": True,
            "backend": self.index_config.backend,
            "kind": self.index_config.kind,
            "build": self.index_config.build,
            "chunking": self._chunking_made_by(),
            "corpus_revision": corpus_revision,
            **({"shards": shards} if (shards := self.index_shards()) > 1 else {}),  # 1: as before shards existed
        }

    def index_shards(self) -> int:
        """The graphs the index is built in: ``index.shards``, else ``ray.workers`` for an hnsw kind
        under ``executor: ray``, else 1."""
        from ragcost.index.sharded import can_shard

        cfg = self.index_config
        if cfg.shards is not None:
            return cfg.shards
        if self.config.executor == "ray" and cfg.device == "cpu" and can_shard(cfg):
            return self.config.ray_options.workers
        return 1

    def _chunking_made_by(self) -> dict:
        """Size and overlap; the tail rule only when there is one, the title rule only when it is not 0.1's
        (artifacts built before either existed stay valid)."""
        from ragcost.ingest.chunker import LEGACY_TITLE, default_min_tail

        size, overlap = self.chunking()
        ch = self.config.chunking
        tail = {} if ch.tail == "none" else {"tail": ch.tail, "min_tail": ch.min_tail or default_min_tail(size)}
        title = {} if ch.title == LEGACY_TITLE else {"title": ch.title}
        return {"size": size, "overlap": overlap, **tail, **title}

    def chunking(self) -> tuple[int, int]:
        """(size, overlap) in tokens: the configured size, or the model's window less its two special tokens."""
        ch = self.config.chunking
        window = self.embedder.max_tokens - 2  # [CLS] and [SEP] take two places in the model's window
        size = window if ch.size is None else ch.size
        where = self.loaded.where(["chunking", "size"])
        if size > window:
            raise ConfigError(f"{where}: chunking.size {size} is larger than the model's window of {window} tokens; "
                              f"set chunking.size <= {window} (or leave it out), or chunks would be silently truncated")
        if ch.overlap >= size:
            raise ConfigError(f"{where}: chunking.overlap {ch.overlap} must be smaller than the chunk size {size}; lower it")
        return size, ch.overlap

    def stages(self) -> list[Stage]:
        """The implicit embed stage, then the pipeline's stages, each built with this pipeline as its context."""
        if self._stages is None:
            from ragcost.stages.embed import EmbedQueries

            stages: list[Stage] = [EmbedQueries(EmbedQueries.Params(resource=self.config.embed.resource), self)]
            stages += [cls(params, self) for cls, params in self.loaded.stage_specs]
            reranks = [st for st in stages if st.reorders_hits]
            for st in reranks[:-1]:
                st.final = False  # a requested k is cut by the last re-rank only; earlier ones keep at least k
            self._stages = stages
        return self._stages

    def query_sizes(self, k: Optional[int]) -> tuple[int, Optional[int]]:
        """(hits retrieve fetches, results the re-rank keeps) for a request's k: k is the number of results the user
        gets, whatever the stages keep. No k: the pipeline's own sizes (retrieve's k, each re-rank's top_n). A k with
        a re-rank after the retrieve: retrieve fetches at least its own k (the re-rank's candidates are the pipeline's,
        so the results are the first k of what a larger k would give) and the last re-rank keeps exactly k."""
        specs = self.loaded.stage_specs
        at = next((i for i, (cls, _) in enumerate(specs) if cls.fetches_hits), None)
        own = specs[at][0].final_k(specs[at][1]) if at is not None else 10
        if k is None:
            return own, None
        if at is None or not any(cls.reorders_hits for cls, _ in specs[at + 1:]):
            return k, None
        return max(k, own), k

    def stage(self, type_: str) -> Optional[Stage]:
        return next((s for s in self.stages() if s.type == type_), None)

    def warm_up(self) -> None:
        for s in self.stages():
            s.warm_up()

    def run(self, states: list[QueryState]) -> RunResult:
        """One batch through every stage, timed and priced; storage is added by the caller."""
        result = Runner(self.stages(), self.price_book).run(states)
        result.storage_usd_per_query = self.storage_usd_per_query()
        return result
