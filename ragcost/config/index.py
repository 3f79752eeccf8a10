"""Index configuration: backend and kind by name, with build parameters kept apart from search parameters.

This model only carries the YAML. Which backends and kinds exist, and which parameters each kind
takes, the backends declare themselves; ``ragcost.index.check_config`` checks a config against
them (the pipeline loader calls it). The config layer never imports the index layer.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, PrivateAttr, field_validator

from ragcost.config.base import Strict


class ServeShards(Strict):
    """Where a sharded index's shards are searched at query time: here, or each in a Ray actor."""

    on: Literal["process", "ray"] = Field("process", description="process: this process holds every shard and walks "
                                          "them in turn; ray: one Ray actor per shard (the pipeline's ray.address), "
                                          "searched in parallel, top k merged")
    address: Optional[str] = Field(None, description="the Ray cluster the shard actors run on: its GCS host:port, "
                                   "ray://host:port or auto; null = the pipeline's ray.address, else auto")
    channel: Literal["tcp", "ray"] = Field("tcp", description="how a search reaches a shard actor: tcp, a persistent "
                                           "socket straight to the actor (Ray starts, restarts and retries it); ray, "
                                           "a Ray actor call per search (1-2 ms more per fan-out)")
    connect_timeout_s: float = Field(10.0, gt=0, le=600, description="a cluster that does not answer within this is an error naming the address")
    cpus_per_shard: float = Field(1.0, gt=0, description="CPUs each shard actor reserves (its search threads)")
    max_restarts: int = Field(1, ge=0, le=100, description="times Ray restarts a dead shard actor; a failed call is retried once")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="a shard that does not answer within this is missing "
                             "from the answer, which is flagged partial")
    resource: Optional[str] = Field(None, description="price-book resource the shard actors' CPU is priced on; "
                                    "null = the pipeline's resource")
    nodes: dict[str, str] = Field(default_factory=dict, description="Ray node (its IP address, as `ray status` and "
                                  "the ledger's node column show it) -> the price-book resource a shard actor's CPU "
                                  "is priced on while it runs there; a node not named here uses resource")

    @field_validator("nodes")
    @classmethod
    def _nodes_are_addresses(cls, value: dict[str, str]) -> dict[str, str]:
        import ipaddress

        for node, resource in value.items():
            try:
                ipaddress.ip_address(str(node))
            except ValueError:
                raise ValueError(f"{node!r} is not an IP address; name each Ray node by its IP address "
                                 "(the node column of `ragcost report`, or `ray status`)") from None
            if not str(resource).strip():
                raise ValueError(f"{node}: empty resource; name a time resource of the price book")
        return value

    def resource_of(self, node: str, default: str) -> str:
        """The resource a shard's CPU on ``node`` is priced on."""
        return self.nodes.get(node) or self.resource or default


class IndexConfig(Strict):
    """One vector index. ``build`` makes the artifact; ``search`` can change per query or sweep."""

    backend: str = Field("hnswlib", description="index backend: a name in the index registry (hnswlib, faiss, a plugin's)")
    kind: str = Field("hnsw", description="index structure the backend offers (flat, hnsw, ivf_flat, ivf_pq, ...)")
    build: dict[str, Any] = Field(default_factory=dict, description="build parameters for this kind")
    search: dict[str, Any] = Field(default_factory=dict, description="search parameters for this kind")
    device: Literal["cpu", "gpu"] = Field("cpu", description="gpu uses faiss-gpu when installed")
    threads: int = Field(0, ge=0, description="threads for build and batch search; 0 = all cores")
    shards: Optional[int] = Field(None, description="hnsw kinds: build this many graphs over contiguous label "
                                  "ranges, search them all and merge the top k; null = ray.workers under executor: "
                                  "ray, else 1 (one graph)")

    serve: ServeShards = Field(default_factory=ServeShards, description="query time: shards searched here "
                               "(process) or in Ray actors (on: ray); not part of the fingerprint")

    @field_validator("shards")
    @classmethod
    def _at_least_one_shard(cls, value: Optional[int]) -> Optional[int]:
        if value is not None and value < 1:
            raise ValueError("a shard count is 1 (one graph) or more; set shards: 1 or more, or remove it")
        return value

    # Where the pipeline's store keeps its chunks: (SQLAlchemy URL, chunk table). Not YAML and not
    # part of the fingerprint: the pipeline loader sets it, and only a backend that keeps its vectors
    # in the store's own database (pgvector) reads it.
    _store_location: Optional[tuple[str, str]] = PrivateAttr(default=None)

    def at_store(self, url: str, chunk_table: str) -> "IndexConfig":
        """This config, told where the store's chunk table is (in place, and returned)."""
        self._store_location = (url, chunk_table)
        return self

    @property
    def store_location(self) -> Optional[tuple[str, str]]:
        return self._store_location
