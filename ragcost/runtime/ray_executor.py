"""``executor: ray``: the corpus is embedded by Ray Data ``map_batches`` over an actor pool.

Each row of the dataset is one write batch (at most 32 documents, the store's transaction),
each actor loads the model once and checks that its bytes are the ones the driver fingerprinted,
and the driver receives the vectors in batch order (``preserve_order``) and writes each batch
through the store in one transaction, exactly as the local executor does. So a kill of the
driver loses at most the batches in flight, a killed worker is restarted by Ray and its batch
retried, and a rerun embeds only what the store lacks: nothing lost, nothing stored twice.

Ray is an optional dependency (``pip install 'ragcost[ray]'``), imported only here and only
when a pipeline asks for it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from ragcost.config.pipeline import EmbedConfig, PipelineConfig, RayOptions
from ragcost.errors import ConfigError, DependencyError, ExecutorError

_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "TOKENIZERS_PARALLELISM": "false"}


@dataclass
class EmbeddedPart:
    """One write batch's vectors, in the order its texts were given, and who embedded them."""

    index: int
    vectors: np.ndarray
    worker: Optional[str]  # "node-ip:pid" of the actor; None when every text came from a cache
    embedded: int  # texts a worker embedded now (the rest were known to the driver's cache)
    seconds: float = 0.0  # the worker's busy time on them (its model calls), for throughput per worker


def use_ray(config: PipelineConfig, address: str) -> PipelineConfig:
    """``config`` with ``executor: ray`` at ``address`` (``--ray ADDRESS``); its other ray options are kept."""
    opts = config.ray_options.model_copy(update={"address": address})
    return config.model_copy(update={"executor": "ray", "ray": opts})


def embed_in_pieces(emb: Any, texts: list[str], piece: int) -> np.ndarray:
    """Vectors of ``texts`` in encode calls of ``piece`` texts, as the local executor makes them (same vectors)."""
    if not texts:
        return np.zeros((0, emb.native_dim), np.float32)
    return np.vstack([emb.embed(texts[k : k + piece]) for k in range(0, len(texts), piece)])


def _import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise DependencyError("executor: ray needs Ray Data: pip install 'ragcost[ray]'") from None
    return ray


def _host_port(address: str) -> Optional[tuple[str, int]]:
    """(host, port) of a GCS or ray:// address; None for ``auto`` (Ray finds the local cluster itself)."""
    if address == "auto":
        return None
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"ray.address {address!r} is not host:port; give the address `ray start --head` printed "
                          "(e.g. 127.0.0.1:6379), ray://host:10001, or auto")
    return host.strip("[]"), int(port)


def check_answers(address: str, timeout: float) -> None:
    """An ExecutorError naming ``address`` unless something accepts a connection there within ``timeout``."""
    hp = _host_port(address)
    if hp is None:
        return
    try:
        socket.create_connection(hp, timeout=timeout).close()
    except OSError as e:
        why = "timed out" if isinstance(e, socket.timeout) else (e.strerror or type(e).__name__).lower()
        raise ExecutorError(f"ray: no cluster answers at {address} ({why}, within {timeout:g}s); start one with "
                            "`ray start --head` or fix executor ray.address / --ray") from None


def preflight(opts: RayOptions) -> None:
    """Before any work: the cluster answers and Ray is installed (each a one-line error otherwise)."""
    check_answers(opts.address or "auto", opts.connect_timeout_s)
    _import_ray()


def _runtime_env() -> dict[str, Any]:
    """The driver's own ragcost code on every worker, and the model hub offline there too."""
    import ragcost

    return {"py_modules": [str(Path(ragcost.__file__).parent)],
            "env_vars": {**_OFFLINE, "RAY_DATA_DISABLE_PROGRESS_BARS": "1"},
            "excludes": ["__pycache__", "*.pyc"]}


def connect(opts: RayOptions) -> tuple[Any, bool]:
    """(ray, whether this call joined): the cluster at ``opts.address``, or an ExecutorError naming it."""
    import logging

    address = opts.address or "auto"
    check_answers(address, opts.connect_timeout_s)
    ray = _import_ray()
    if ray.is_initialized():
        return ray, False
    try:
        ray.init(address=address, runtime_env=_runtime_env(), logging_level=logging.ERROR,
                 log_to_driver=False, configure_logging=True)
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ExecutorError(f"ray: cannot join the cluster at {address}: {first}; start one with "
                            "`ray start --head` or fix executor ray.address / --ray") from None
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # its plan and "progress bars disabled" notes
    return ray, True


class EmbedActor:
    """One Ray actor: the pipeline's embedder, loaded once, refusing a model whose bytes differ from the driver's."""

    def __init__(self, embed: dict, base: Optional[str], fingerprint: str, threads: int, piece: int) -> None:
        os.environ.update(_OFFLINE)
        import ray

        try:
            import torch

            torch.set_num_threads(max(1, threads))
        except ImportError:  # another runtime (onnx, static) sets its own threads
            pass
        from ragcost.embed import make_embedder

        self.emb = make_embedder(EmbedConfig.model_validate(embed), base=Path(base) if base else None)
        self.emb.warm_up()
        got = self.emb.fingerprint()
        if got != fingerprint:
            raise ConfigError(f"ray worker {ray.util.get_node_ip_address()}: embed.model {embed['model']!r} there has "
                              f"other bytes ({got[:12]}) than on the driver ({fingerprint[:12]}); install the same "
                              "model on every node, or vectors of two models would mix")
        self.worker = f"{ray.util.get_node_ip_address()}:{os.getpid()}"
        self.piece = piece

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from time import perf_counter

        out, secs = [], []
        for texts in batch["texts"]:
            t0 = perf_counter()
            out.append(embed_in_pieces(self.emb, [str(t) for t in texts], self.piece).astype(np.float32))
            secs.append(perf_counter() - t0)
        return {"part": np.asarray(batch["part"], np.int64),
                "vectors": np.array([v.tobytes() for v in out], dtype=object),
                "worker": np.array([self.worker] * len(out), dtype=object),
                "seconds": np.asarray(secs, np.float64)}


class RayEmbedding:
    """A connection to the cluster for one run; ``embed(parts)`` yields each part's vectors in order."""

    def __init__(self, config: PipelineConfig, base: Optional[Path], emb: Any, piece: int) -> None:
        """``piece``: texts per encode call inside a batch (the local executor's, so the vectors match)."""
        self.piece = piece
        self.opts: RayOptions = config.ray_options
        self.embed_config = config.embed
        self.base = base
        self.emb = emb
        self._ray: Any = None
        self._owns = False

    def __enter__(self) -> "RayEmbedding":
        self.connect()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._owns and self._ray is not None:
            self._ray.shutdown()
        self._ray, self._owns = None, False

    def connect(self) -> None:
        """Join the cluster, or fail in one line naming the address within the connect timeout."""
        self._ray, self._owns = connect(self.opts)
        ctx = self._ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True  # batches reach the store in the local executor's order
        ctx.enable_progress_bars = False  # ragcost shows the workers' progress itself

    def _known(self, texts: list[str]) -> list[Optional[np.ndarray]]:
        """Vectors the driver's embedder already holds (the eval text cache); None where a worker must embed."""
        known = getattr(self.emb, "known_vectors", None)
        return known(texts) if known is not None else [None] * len(texts)

    def embed(self, parts: list[list[str]]) -> Iterator[EmbeddedPart]:
        """Each part's vectors, in order; only texts the driver does not already know travel to the workers."""
        known = [self._known(texts) for texts in parts]
        rows = [{"part": i, "texts": [t for t, v in zip(texts, kn) if v is None]}
                for i, (texts, kn) in enumerate(zip(parts, known)) if any(v is None for v in kn)]
        results = self._results(rows) if rows else iter(())
        dim = self.emb.native_dim
        for i, (texts, kn) in enumerate(zip(parts, known)):
            worker, fresh, secs = None, np.zeros((0, dim), np.float32), 0.0
            if any(v is None for v in kn):
                got = next(results)
                if int(got["part"]) != i:  # preserve_order makes this impossible; never write a wrong vector
                    raise ExecutorError(f"ray: batch {got['part']} came back where batch {i} was expected")
                fresh = np.frombuffer(got["vectors"], dtype=np.float32).reshape(-1, dim)
                worker, secs = str(got["worker"]), float(got["seconds"])
                add = getattr(self.emb, "add_vectors", None)
                if add is not None:
                    add([t for t, v in zip(texts, kn) if v is None], fresh)
            it = iter(fresh)
            vecs = np.vstack([v if v is not None else next(it) for v in kn]) if texts else np.zeros((0, dim), np.float32)
            yield EmbeddedPart(i, np.ascontiguousarray(vecs, np.float32), worker, len(fresh), secs)

    def _results(self, rows: list[dict]) -> Iterator[dict]:
        ray, o = self._ray, self.opts
        ds = ray.data.from_items(rows, override_num_blocks=len(rows))  # one block per batch: actors share the work
        ds = ds.map_batches(
            EmbedActor, batch_size=1, batch_format="numpy",
            fn_constructor_kwargs={"embed": self.embed_config.model_dump(), "base": str(self.base) if self.base else None,
                                   "fingerprint": self.emb.fingerprint(), "threads": int(o.cpus_per_worker),
                                   "piece": self.piece},
            compute=ray.data.ActorPoolStrategy(size=o.workers), num_cpus=o.cpus_per_worker)
        try:
            yield from ds.iter_rows()
        except ray.exceptions.RayError as e:
            raise ExecutorError(f"ray: embedding failed on the cluster at {o.address or 'auto'}: {_first_cause(e)}; "
                                "what was written is kept, rerun to finish") from None


def _first_cause(e: BaseException) -> str:
    """The message of the error a worker raised (a ConfigError from an actor, say), not Ray's wrapping of it.

    Ray carries the worker's traceback as text: its last ``Type: message`` line is the original error.
    """
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    found = re.findall(r"^([\w.]*(?:Error|Exception)): (.+)$", text, flags=re.M)
    if not found:
        return type(e).__name__
    kind, message = found[-1]
    return message[:300] if kind.startswith("ragcost.") else f"{kind.rsplit('.', 1)[-1]}: {message[:300]}"
