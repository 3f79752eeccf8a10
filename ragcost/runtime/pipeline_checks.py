"""What `ragcost validate` checks of a loaded pipeline without running it: the price-book resources it names
(shard actors' among them), its source, its store URL, the embedder, the dim and the chunk size.

A mixin of :class:`ragcost.runtime.pipeline.Pipeline`: it reads the pipeline's ``config``, ``loaded``,
``index_config``, ``price_book``, ``embedder`` and ``base``, and its ``check_dim`` and ``chunking``.
"""

from __future__ import annotations

from typing import Any

from ragcost.errors import ConfigError
from ragcost.runtime.load import resolve
from ragcost.urls import shown_url, url_problem, without_secrets


class PipelineChecks:
    config: Any
    loaded: Any
    index_config: Any
    price_book: Any
    embedder: Any
    base: Any

    def resource_refs(self) -> dict[str, str]:
        """Price-book resources this pipeline names, with where it names them (for validation)."""
        refs: dict[str, str] = {self.config.resource: self.loaded.where(["resource"])}
        if self.config.embed.resource:
            refs.setdefault(self.config.embed.resource, self.loaded.where(["embed", "resource"]))
        for i, (_, params) in enumerate(self.loaded.stage_specs):
            if params.resource:
                refs.setdefault(params.resource, self.loaded.where(["stages", i, "resource"]))
        refs.update(self.shard_resource_refs())
        return refs

    def shard_resource_refs(self) -> dict[str, str]:
        """The resources shard actors are priced on (``index.serve.resource`` and ``.nodes``), with where."""
        serve = self.index_config.serve
        if serve.on != "ray":
            return {}
        refs = {serve.resource: self.loaded.where(["index", "serve", "resource"])} if serve.resource else {}
        for node, name in serve.nodes.items():
            refs.setdefault(name, self.loaded.where(["index", "serve", "nodes", node]) + f" (index.serve.nodes.{node})")
        return refs

    def _check_shard_resources(self) -> None:
        """A shard actor's CPU is priced by the hour: its resource must be a time resource."""
        from ragcost.cost.pricebook import TimeResource

        for name, where in self.shard_resource_refs().items():
            res = self.price_book.resource(name, where)
            if not isinstance(res, TimeResource):
                raise ConfigError(f"{where}: resource {name!r} is {res.kind}-priced; a shard actor's CPU is priced "
                                  f"on an instance billed by the hour (kind: time) -- name one of those")

    def check(self) -> None:
        """Everything `ragcost validate` checks without running: files, price book, resources."""
        from ragcost.cost.pricebook import check_resources

        check_resources(self.price_book, self.resource_refs())
        self._check_shard_resources()
        self._check_source()
        self._check_store_url()
        self.embedder.warm_up()  # the embed type and model (a local folder or a packaged model)
        self.check_dim()
        self.chunking()  # the chunk size against the model's window

    def _check_source(self) -> None:
        from ragcost.ingest.readers import reader_registry

        src = self.config.source_config
        if src.reader is not None and src.reader not in reader_registry:
            raise ConfigError(f"{self.loaded.where(['source', 'reader'])}: source.reader {src.reader!r} is unknown; "
                              f"installed: {reader_registry.known()}")
        if src.path and resolve(self.base, src.path) is None:
            raise ConfigError(f"{self.loaded.where(['source'])}: source: {src.path!r} not found; fix the path or pass --source")

    def _check_store_url(self) -> None:
        """The store URL parses and names a store this install has, without opening (or creating) it."""
        import sqlalchemy as sa

        url = self.config.store_url
        where = self.loaded.where(["store"])
        try:
            backend = sa.engine.make_url(url).get_backend_name()
            sa.engine.make_url(url).get_dialect()
        except Exception as e:  # a malformed URL or a driver that is not installed
            raise ConfigError(f"{where}: store {shown_url(url)!r} cannot be used ({type(e).__name__}: {without_secrets(str(e).splitlines()[0], url)}); "
                              "example: duckdb:///.ragcost/kb.duckdb or postgresql+psycopg://user@host/db") from None
        problem = url_problem(url)
        if problem:
            raise ConfigError(f"{where}: store {problem}")
        if backend not in ("duckdb", "postgresql"):
            raise ConfigError(f"{where}: store {shown_url(url)!r}: no store for {backend!r}; use duckdb:/// or postgresql+psycopg://")
