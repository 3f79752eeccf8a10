"""``index: {serve: {on: ray}}``: each shard of a sharded index searched in a Ray actor of its own.

The driver reads the sharded file's ``shards.json`` and each shard's saved bytes (it never loads a
graph itself), and starts one actor per shard with the backend's file and that shard's float32
vectors (for the exact scan). Ray's scheduler places them, spread over the nodes (``SPREAD``). A
search sends the whole batch of queries to every shard at once -- the allowed labels of a filter
split by the shards' label ranges, a shard with none skipped -- and merges the top k as the
in-process ``ShardedIndex`` does (``merge_top_k``: score, then label), so both give the same labels.

Faults: an actor that dies is restarted by Ray (``max_restarts``) and its call sent once more; a
shard that still fails (or passes ``timeout_s``) is left out of the merge, and the shards missing
from each call are kept for the retrieve stage, which flags the queries ``partial``. An actor Ray
says is dead for good (its restarts spent, or none allowed) is not waited for: it is left out of
every later search at once, the queries answered by the live shards and flagged ``partial``, and
one warning says so (restart the server to start that shard again). Each shard
call reports the CPU-seconds its thread used inside the actor and its node, so the retrieve stage
can price every shard's time.
"""

from __future__ import annotations

import json
import os
import threading
import time
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Optional

import numpy as np

from ragcost.config.index import IndexConfig
from ragcost.config.pipeline import RayOptions
from ragcost.errors import ConfigError, FingerprintError
from ragcost.index.base import NO_ROWS, FilteredResult, VectorIndex
from ragcost.index.sharded import merge_top_k, sharded_class

# Query matrices up to this size travel inside each call (Ray inlines arguments under its 100 KiB
# max_direct_call_object_size); larger ones are put in the object store once and shared by every shard.
INLINE_BYTES = 64 * 1024
# A shard's channel that cannot be connected to (a firewall between the nodes, a dead actor's port) is not
# tried again for this long: its searches go through Ray meanwhile, not a connect timeout each.
CHANNEL_CONNECT_S = 1.0
CHANNEL_BACKOFF_S = 30.0


class ShardActor:
    """One shard: the backend's index read from its saved bytes, its labels and float32 vectors."""

    def __init__(self, config: dict, dim: int, precision: str, blob: bytes, vectors: np.ndarray,
                 labels: np.ndarray, threads: int) -> None:
        import ray

        from ragcost.index import index_registry
        from ragcost.index.sharded import shard_from_bytes

        cfg = IndexConfig.model_validate({**config, "threads": threads})
        holder = sharded_class(index_registry.get(cfg.backend))(cfg, dim, precision, shards=1)
        try:  # the library's own import is not the shard's memory
            __import__(cfg.backend)
        except ImportError:
            pass
        before = _rss()
        self.index = shard_from_bytes(holder, blob)
        self.loaded_rss_bytes = _rss() - before  # what loading this shard's index grew the actor by
        self.vectors = np.ascontiguousarray(vectors, np.float32)
        self.labels = np.ascontiguousarray(labels, np.int64)
        self.where = {"node": ray.util.get_node_ip_address(), "pid": os.getpid()}

    def search(self, queries: np.ndarray, k: int, params: Optional[dict], allowed: Optional[np.ndarray]) -> dict:
        t0, c0 = time.perf_counter(), time.thread_time()
        if allowed is None:
            s, lb = self.index.search(queries, k, params=params)
            rows = NO_ROWS
        else:
            s, lb, rows = self.index.search_filtered(queries, k, params, allowed)
        return {"scores": s, "labels": lb, "exact_rows": rows, **self._spent(t0, c0)}

    def scan(self, queries: np.ndarray, k: int, allowed: np.ndarray) -> dict:
        """Exact top k over this shard's vectors whose labels are ``allowed`` (the small-filter strategy)."""
        from ragcost.index.exact import rows_for_labels, scan_rows

        t0, c0 = time.perf_counter(), time.thread_time()
        s, lb = scan_rows(self.vectors, self.labels, queries, k, rows_for_labels(self.labels, allowed))
        return {"scores": s, "labels": lb, "exact_rows": NO_ROWS, **self._spent(t0, c0)}

    def endpoint(self, token: str) -> list:
        """(host, port) of this actor's direct channel (:mod:`ragcost.runtime.shard_channel`), opened on first ask."""
        from ragcost.runtime.shard_channel import ChannelServer

        if getattr(self, "_channel", None) is None:
            self._channel = ChannelServer(self.where["node"], token.encode(), self._on_channel)
        return list(self._channel.address)

    def _on_channel(self, op: str, header: dict, arrays: dict) -> dict:
        q, allowed = arrays["queries"], arrays.get("allowed")
        if op == "scan":
            return self.scan(q, int(header["k"]), allowed)
        if op == "search":
            return self.search(q, int(header["k"]), header.get("params"), allowed)
        if op == "ping":
            return {}
        raise ValueError(f"unknown op {op!r}")

    def ping(self, queries: np.ndarray) -> None:
        """No work: what one call costs Ray alone (``bench/shard_actors.py`` measures that floor)."""

    def info(self) -> dict:
        return {**self.where, "vectors": len(self.index), "index_bytes": int(self.index.nbytes()), "rss_bytes": _rss(),
                "loaded_rss_bytes": self.loaded_rss_bytes}

    def _spent(self, t0: float, c0: float) -> dict:
        return {"cpu_seconds": time.thread_time() - c0, "wall_seconds": time.perf_counter() - t0, **self.where}


def check_node_map(nodes: dict[str, str], cluster: list[dict], address: Optional[str]) -> None:
    """Every node ``index.serve.nodes`` prices must be a live node of the cluster (``ray.nodes()``)."""
    live = sorted({str(n.get("NodeManagerAddress")) for n in cluster if n.get("Alive")})
    for node in nodes:
        if node not in live:
            raise ConfigError(f"index.serve.nodes: {node!r} names no live node of the Ray cluster at {address or 'auto'} "
                              f"(its nodes: {', '.join(live) or 'none'}); name each node by its IP address as listed "
                              "there, or remove the entry")


def _rss() -> int:
    """This process's resident bytes (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class ShardCall:
    """What one shard did for one search call: its CPU inside the actor, where it ran, whether it failed."""

    shard: int
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    node: str = ""
    pid: int = 0
    retried: bool = False
    failed: Optional[str] = None
    actor_lost: bool = False  # the call failed because its actor died (not a timeout, not an error in the search)


@dataclass
class CallReport:
    """One fan-out: the shards asked, the calls they made, the shards missing from the merge."""

    shards: int
    calls: list[ShardCall] = field(default_factory=list)

    @property
    def missing(self) -> list[int]:
        return sorted(c.shard for c in self.calls if c.failed)


@lru_cache(maxsize=None)
def served_class(inner: type[VectorIndex]) -> type["RayServedIndex"]:
    """The Ray-served counterpart of backend ``inner``'s sharded index: same backend, kinds and devices."""
    base = sharded_class(inner)
    return type(f"RayServed{inner.__name__}", (RayServedIndex,),
                {"inner": inner, "backend": base.backend, "kinds": base.kinds, "devices": base.devices,
                 "filtered_search_params": base.filtered_search_params, "__module__": __name__})


class RayServedIndex(VectorIndex):
    """A sharded index whose shards live in Ray actors; searches fan out and merge. Built elsewhere."""

    inner: ClassVar[type[VectorIndex]]
    suffix = "shards"

    def __init__(self, config: IndexConfig, dim: int, precision: str = "float32") -> None:
        super().__init__(config, dim, precision)
        self.actors: list[Any] = []
        self._lo = np.zeros(0, np.int64)
        self._hi = np.zeros(0, np.int64)
        self._count = 0
        self._bytes = 0
        self.reports: list[CallReport] = []  # fan-outs since the retrieve stage last took them
        self._ray: Any = None
        self._owns = False
        self._held: list[tuple] = []
        self._token = ""
        self._clients: list[Any] = []  # per shard: its ChannelClient, None until (re)opened; [] with channel: ray
        self._lock = threading.Lock()  # one fan-out at a time on the channels (a connection serves one request)
        self._channel_after: dict[int, float] = {}  # shard -> when its unreachable channel is tried again
        self._dead: dict[int, str] = {}  # shard -> why: its actor is dead for good (Ray will not restart it)

    # ---- start and stop -------------------------------------------------------------------
    def start(self, path: Path, vectors: np.ndarray, labels: np.ndarray, opts: RayOptions, index_bytes: int) -> None:
        """One actor per shard of the sharded file at ``path``; ``vectors``/``labels``: the artifact's, sorted."""
        from ragcost.runtime.ray_executor import connect

        serve = self.config.serve
        try:
            with zipfile.ZipFile(path) as z:
                meta = json.loads(z.read("shards.json"))
                blobs = [z.read(f"shard-{i}.{self.inner.suffix}") for i in range(int(meta["shards"]))]
        except (zipfile.BadZipFile, KeyError, ValueError) as e:
            raise FingerprintError(f"{path}: not a sharded index file ({type(e).__name__}: {e})") from None
        self._ray, self._owns = connect(opts)
        ray = self._ray
        try:
            check_node_map(serve.nodes, ray.nodes(), opts.address)
        except ConfigError:
            self.close()
            raise
        actor = ray.remote(ShardActor).options(num_cpus=serve.cpus_per_shard, max_restarts=serve.max_restarts,
                                               max_task_retries=0, scheduling_strategy="SPREAD")
        edges = np.concatenate([[0], np.cumsum(meta["counts"])]).astype(int)
        cfg = self.config.model_dump(exclude={"serve"})
        threads = max(1, int(serve.cpus_per_shard))
        # Held for the actors' lifetime: Ray restarts a dead actor from these very objects (its constructor
        # arguments), and a restart fails once they go out of scope.
        self._held = [(ray.put(b), ray.put(np.ascontiguousarray(vectors[a:z_], np.float32)), ray.put(labels[a:z_]))
                      for b, a, z_ in zip(blobs, edges[:-1], edges[1:])]
        self.actors = [actor.remote(cfg, self.dim, self.precision, b, v, lb, threads) for b, v, lb in self._held]
        self._lo = np.array([r[0] for r in meta["ranges"]], np.int64)
        self._hi = np.array([r[1] for r in meta["ranges"]], np.int64)
        self._count = int(edges[-1])
        self._bytes = int(index_bytes)
        self.placement = ray.get([a.info.remote() for a in self.actors], timeout=max(serve.timeout_s, 120))
        if serve.channel == "tcp":
            import secrets

            self._token = secrets.token_hex(32)
            try:
                ends = ray.get([a.endpoint.remote(self._token) for a in self.actors], timeout=max(serve.timeout_s, 120))
                self._clients = [self._connect_to(host, port) for host, port in ends]
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ray.exceptions.RayTaskError):
                self._clients = [None] * len(self.actors)  # each asked again at its first search (_client)

    def close(self) -> None:
        if self._ray is None:
            return
        for a in self.actors:
            try:
                self._ray.kill(a, no_restart=True)
            except Exception:  # an actor already gone  # noqa: BLE001
                pass
        for c in self._clients:
            if c is not None:
                c.close()
        self.actors, self._held, self._clients = [], [], []
        if self._owns:
            self._ray.shutdown()
        self._ray, self._owns = None, False

    # ---- search ---------------------------------------------------------------------------
    def search(self, queries: np.ndarray, k: int, params: dict[str, Any] | None = None,
               allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self._fan_out("search", queries, k, params, allowed)[:2]

    def search_filtered(self, queries: np.ndarray, k: int, params: dict[str, Any] | None,
                        allowed: np.ndarray) -> FilteredResult:
        return self._fan_out("search", queries, k, params, allowed)

    def scan_allowed(self, queries: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The exact scan of the allowed labels, each shard scanning its own vectors."""
        return self._fan_out("scan", queries, k, None, allowed)[:2]

    def search_one(self, query: np.ndarray, k: int) -> tuple[list[int], list[float]]:
        s, lb = self.search(np.asarray(query, np.float32).reshape(1, -1), k)
        return lb[0].tolist(), s[0].tolist()

    def take_reports(self) -> list[CallReport]:
        out, self.reports = self.reports, []
        return out

    def _fan_out(self, method: str, queries: np.ndarray, k: int, params: Optional[dict],
                 allowed: Optional[np.ndarray]) -> FilteredResult:
        queries = np.atleast_2d(np.ascontiguousarray(queries, dtype=np.float32))
        if params:
            self.search_params(params)  # a bad override is refused here, before any shard is asked
        parts: dict[int, Optional[np.ndarray]] = {i: None for i in range(len(self.actors))}
        if allowed is not None:
            allowed = np.sort(np.asarray(allowed, dtype=np.int64))
            starts = np.searchsorted(allowed, self._lo, side="left")
            stops = np.searchsorted(allowed, self._hi, side="right")
            parts = {i: allowed[a:b] for i, (a, b) in enumerate(zip(starts, stops)) if b > a}
        # A small matrix goes by value: Ray inlines it in each call, where a ray.put would make every actor
        # on another node pull it from this node's object store first (measured: 2.5x the fan-out's time).
        held: list[Any] = []

        def send(i: int):
            if not held:
                held.append(self._ray.put(queries) if len(parts) > 1 and queries.nbytes > INLINE_BYTES else queries)
            qref = held[0]
            fn = getattr(self.actors[i], method)
            return fn.remote(qref, k, parts[i]) if method == "scan" else fn.remote(qref, k, params, parts[i])

        answers: dict[int, dict] = {}
        channel_failed: set[int] = set()
        live = {i: p for i, p in parts.items() if i not in self._dead}  # a dead shard is not asked, nor waited for
        if self._clients and live:
            with self._lock:
                answers, channel_failed = self._over_channels(method, queries, k, params, live)
        calls = {i: ShardCall(i, retried=i in channel_failed, failed=self._dead.get(i)) for i in parts}
        refs = {i: send(i) for i in live if i not in answers}
        deadline = time.monotonic() + self.config.serve.timeout_s  # one timeout for the whole fan-out
        first = self._get_all(list(refs.values())) if refs else []
        for j, (i, ref) in enumerate(refs.items()):
            call = calls[i]
            got = first[j] if first is not None else self._get(ref, call, max(deadline - time.monotonic(), 0.0))
            back = self._back(i) if got is None and call.actor_lost else False
            if back is None:  # dead for good: left out now, and of every later search without a wait
                self._bury(i, call)
            elif back:
                call.retried = True  # it died and Ray restarted it: send the call once more
                got = self._get(send(i), call, self.config.serve.timeout_s)
            if got is not None:
                self._drop_client(i)  # answered through Ray: the channel is reopened (a restarted actor has a new one)
            answers[i] = got
        report = CallReport(len(self.actors), [calls[i] for i in parts])
        scores, labels, exact = [], [], [NO_ROWS]
        for i, call in calls.items():
            got = answers.get(i)
            if got is None:
                continue
            call.failed = None
            call.cpu_seconds, call.wall_seconds = float(got["cpu_seconds"]), float(got["wall_seconds"])
            call.node, call.pid = str(got["node"]), int(got["pid"])
            scores.append(got["scores"])
            labels.append(got["labels"])
            exact.append(got["exact_rows"])
        self.reports.append(report)
        if not scores:
            empty = np.zeros((len(queries), 0))
            return FilteredResult(*merge_top_k([empty.astype(np.float32)], [empty.astype(np.int64)], k), NO_ROWS)
        return FilteredResult(*merge_top_k(scores, labels, k), np.unique(np.concatenate(exact)).astype(np.int64))

    def _over_channels(self, method: str, queries: np.ndarray, k: int, params: Optional[dict],
                       parts: dict[int, Optional[np.ndarray]]) -> tuple[dict[int, dict], set[int]]:
        """Every shard's answer over its direct channel: the request to each, then each reply, so they search
        at once. Returns the answers and the shards whose channel failed (asked through Ray next)."""
        from ragcost.runtime.shard_channel import ChannelError, ChannelUnreachable

        answers: dict[int, dict] = {}
        failed: set[int] = set()
        sent = []
        header = {"op": method, "k": int(k), "params": params}
        for i, allowed in parts.items():
            if self._channel_after.get(i, 0.0) > time.monotonic():
                continue  # unreachable a moment ago: through Ray, not flagged (nothing failed this time)
            client = self._client(i)
            if client is None:
                failed.add(i)
                continue
            try:
                client.send(header, [("queries", queries)] + ([("allowed", allowed)] if allowed is not None else []))
                sent.append(i)
            except ChannelUnreachable:
                self._drop_client(i)
                self._channel_after[i] = time.monotonic() + CHANNEL_BACKOFF_S
                failed.add(i)
            except ChannelError:
                self._drop_client(i)
                failed.add(i)
        deadline = time.monotonic() + self.config.serve.timeout_s
        for i in sent:
            try:
                answers[i] = self._clients[i].receive(deadline - time.monotonic())
            except ChannelError:
                self._drop_client(i)
                failed.add(i)
        return answers, failed

    def _client(self, i: int) -> Any:
        """Shard ``i``'s channel, asking its actor for the endpoint when there is none; None if it does not answer."""
        if self._clients[i] is None:
            ray = self._ray
            try:
                host, port = ray.get(self.actors[i].endpoint.remote(self._token), timeout=self.config.serve.timeout_s)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ray.exceptions.RayTaskError):
                return None
            self._clients[i] = self._connect_to(host, port)
        return self._clients[i]

    def _connect_to(self, host: str, port: int) -> Any:
        """A client of the channel at ``host:port`` (it connects on its first send)."""
        from ragcost.runtime.shard_channel import ChannelClient

        return ChannelClient((str(host), int(port)), self._token.encode(),
                             min(self.config.serve.connect_timeout_s, CHANNEL_CONNECT_S))

    def _drop_client(self, i: int) -> None:
        if self._clients and self._clients[i] is not None:
            self._clients[i].close()
            self._clients[i] = None

    def _back(self, i: int) -> Optional[bool]:
        """Whether shard ``i``'s actor, whose call failed because it died, answers again (restarted by Ray) within
        ``timeout_s``: True; False when not in time; None when Ray says at once that it is dead for good (a new
        call gets ActorDiedError: its restarts are spent, or none are allowed; while Ray restarts an actor a call
        gets ActorUnavailableError, or waits for it). Waiting out ``timeout_s`` on a dead actor stalled every query."""
        ray, end = self._ray, time.monotonic() + self.config.serve.timeout_s
        while time.monotonic() < end:
            try:
                ray.get(self.actors[i].info.remote(), timeout=max(end - time.monotonic(), 0.1))
                return True
            except ray.exceptions.ActorDiedError:
                return None
            except ray.exceptions.RayActorError:  # unavailable: being restarted
                pass
            except ray.exceptions.GetTimeoutError:
                return False
            time.sleep(0.1)
        return False

    def _bury(self, i: int, call: ShardCall) -> None:
        """Shard ``i``'s actor is dead for good: its searches are left out from now on (the answers flagged partial)."""
        import warnings

        serve = self.config.serve
        why = (f"shard {i}'s actor is dead and Ray will not restart it (index.serve.max_restarts: {serve.max_restarts}, "
               "spent)")
        self._dead[i] = call.failed = why
        self._drop_client(i)
        warnings.warn(f"{why}: queries are answered from the other {len(self.actors) - len(self._dead)} shard(s) and "
                      "flagged partial; restart the server (or Session) to start it again, or raise max_restarts",
                      RuntimeWarning, stacklevel=2)

    def _get_all(self, refs: list) -> Optional[list]:
        """Every shard's answer in one ``ray.get`` (the usual case); None when any failed, to be asked one by one."""
        ray = self._ray
        try:
            return ray.get(refs, timeout=self.config.serve.timeout_s)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ray.exceptions.RayTaskError):
            return None

    def _get(self, ref: Any, call: ShardCall, timeout: float) -> Optional[dict]:
        ray = self._ray
        try:
            return ray.get(ref, timeout=timeout)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ray.exceptions.RayTaskError) as e:
            call.failed = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]}"
            call.actor_lost = isinstance(e, ray.exceptions.RayActorError)
            return None

    # ---- what the protocol asks of an index ----------------------------------------------
    def build(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        raise NotImplementedError("a Ray-served index is built as a sharded index (ragcost index), then served")

    def save(self, path: Path) -> None:
        raise NotImplementedError("a Ray-served index is saved as the sharded index it was loaded from")

    def load(self, path: Path) -> None:
        raise NotImplementedError("use start(): the shards load inside their actors")

    def nbytes(self) -> int:
        """The shards' bytes, summed (the manifest's figure): what the actors hold between them."""
        return self._bytes

    def __len__(self) -> int:
        return self._count


def serve_on_ray(artifact: Any, directory: Path, config: IndexConfig, opts: RayOptions) -> Any:
    """``artifact`` (a LoadedIndex of a sharded index) with its index replaced by actors serving its shards."""
    from ragcost.index import index_registry

    m = artifact.manifest
    index = served_class(index_registry.get(config.backend))(config, m.dim, m.precision)
    index.start(Path(directory) / m.index_file, artifact.vectors, artifact.labels, opts, m.index_bytes)
    index.warnings = list(m.warnings)
    artifact.index = index
    return artifact
