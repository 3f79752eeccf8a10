"""Capacity and cost planning: KV cache, sequences per GPU, index RAM, $ per 1M tokens, on-prem payback.

Pure functions over numbers; ``ragcost plan`` prints their inputs beside their results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ragcost.cost.storage import holds_float32, storage_bytes
from ragcost.errors import ConfigError

# Bytes per value of a model dtype (KV cache and weights).
DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4,
    "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
    "float8": 1, "fp8": 1, "int8": 1,
    "int4": 0.5, "fp4": 0.5,
}
INDEX_KINDS = ("flat", "hnsw", "ivf_flat", "ivf_pq")  # the built-in backends' kinds (plan --kind's help)
PRECISIONS = ("float32", "float16", "int8", "binary")  # ragcost.index.sizes.PRECISION_BYTES' keys (a test holds them equal)


def dtype_bytes(dtype: str) -> float:
    """Bytes per value of ``dtype`` (torch names like ``torch.bfloat16`` accepted)."""
    key = str(dtype).lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ConfigError(f"dtype {dtype!r} is unknown; use one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_value: float) -> float:
    """K and V for every layer and KV head: 2 x layers x kv_heads x head_dim x bytes."""
    return 2 * layers * kv_heads * head_dim * bytes_per_value


def model_shape_from_config(path: str | Path, given: frozenset[str] = frozenset()) -> dict[str, Any]:
    """layers, kv_heads, head_dim and dtype from a Hugging Face ``config.json`` (a file or its folder).

    ``given``: the keys the caller sets itself (``--kv-heads``...): the config's value of those is not read.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError(f"{p}: model config not found; pass the model folder or its config.json")
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None
    cfg = cfg.get("text_config", cfg) if "num_hidden_layers" not in cfg else cfg  # multimodal wrappers
    for key in ("num_hidden_layers", "num_attention_heads"):
        if key not in cfg:
            raise ConfigError(f"{p}: {key} is missing; give --layers/--kv-heads/--head-dim instead")
    layers, heads = _count(p, cfg, "num_hidden_layers", "--layers"), _count(p, cfg, "num_attention_heads", "--kv-heads and --head-dim")
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if "hidden_size" not in cfg:
            raise ConfigError(f"{p}: neither head_dim nor hidden_size is set; give --head-dim")
        head_dim = _count(p, cfg, "hidden_size", "--head-dim") // heads
    else:
        head_dim = _count(p, cfg, "head_dim", "--head-dim")
    # null or absent: multi-head attention (one KV head per head); 0 is not "absent", it is a broken config
    kv_heads = heads if "kv_heads" in given or cfg.get("num_key_value_heads") is None else \
        _count(p, cfg, "num_key_value_heads", "--kv-heads")
    return {
        "layers": layers,
        "kv_heads": kv_heads,
        "head_dim": int(head_dim),
        "dtype": str(cfg.get("torch_dtype") or cfg.get("dtype") or "float16"),
    }


def _count(p: Path, cfg: dict, key: str, option: str) -> int:
    """A config.json count that must be a whole number >= 1, refused naming the file, key and value."""
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{p}: {key} is {json.dumps(v)}; it must be a whole number >= 1: fix the config, or give {option}")
    return v


def sequences_that_fit(gpu_mem_bytes: float, weight_bytes: float, kv_per_token: float, context_tokens: int,
                       mem_utilization: float = 0.9) -> int:
    """Whole sequences of ``context_tokens`` whose KV cache fits in ``gpu_mem x mem_utilization`` after the weights.

    Activations and the CUDA graph pool are not counted, so this is an upper bound (vLLM profiles them).
    """
    if not 0 < mem_utilization <= 1:
        raise ConfigError(f"mem_utilization {mem_utilization} must be in (0, 1], like vLLM's gpu_memory_utilization 0.9")
    free = gpu_mem_bytes * mem_utilization - weight_bytes
    per_seq = kv_per_token * context_tokens
    if free <= 0 or per_seq <= 0:
        return 0
    return int(free // per_seq)


def index_bytes(n: int, dim: int, precision: str = "float32", kind: str = "flat", M: int = 16,
                pq_m: Optional[int] = None, nbits: int = 8, backend: Optional[str] = None) -> float:
    """Bytes of the index structure itself over ``n`` vectors: what its backend declares
    (:attr:`ragcost.index.KindSpec.size`; ``backend`` None: the kind's default backend). IVF-PQ's
    centroids and codebooks are counted (they are most of a small index), IVF-Flat's centroids are not.
    A ConfigError names an unknown backend or kind, or a kind that declares no size."""
    from ragcost.index.check import DEFAULT_BACKEND, kind_spec
    from ragcost.index.sizes import PRECISION_BYTES

    if precision not in PRECISION_BYTES:
        raise ConfigError(f"precision {precision!r} is unknown; use one of {', '.join(PRECISION_BYTES)}")
    spec = kind_spec(backend, kind)
    if spec.size is None:
        name = backend or DEFAULT_BACKEND.get(kind, "faiss")
        raise ConfigError(f"index backend {name!r} kind {kind!r} declares no size formula (KindSpec.size), so plan "
                          "cannot estimate it; plan another kind, or build it and read its RAM in `ragcost report`")
    return spec.size(n, dim, precision, M=M, pq_m=pq_m, nbits=nbits)


def index_ram_bytes(n: int, dim: int, precision: str = "float32", kind: str = "flat", M: int = 16,
                    pq_m: Optional[int] = None, nbits: int = 8, backend: Optional[str] = None) -> tuple[int, int]:
    """(RAM bytes, of which the index structure) by the one storage formula query and eval charge.

    The per-kind structure comes from :func:`index_bytes`; what is added to it (the float32
    exact-scan copy, unless the backend declares that the kind holds every vector at float32) comes
    from :func:`ragcost.cost.storage.storage_bytes`.
    """
    from ragcost.index.check import DEFAULT_BACKEND

    own = int(index_bytes(n, dim, precision, kind, M=M, pq_m=pq_m, nbits=nbits, backend=backend))
    name = backend or DEFAULT_BACKEND.get(kind, "faiss")
    ram, _disk = storage_bytes(own, n, dim, holds_vectors=holds_float32(name, kind, precision))
    return ram, own


# The one idle rule `plan` uses for $ per 1M tokens and payback alike, in two views side by side:
# - "fully loaded": the instance is provisioned all month (a cloud GPU stays on); idle hours are paid,
#   so a busy share b spreads each hour's price over b x the tokens. What a reserved or always-on GPU costs.
# - "busy": only busy hours are paid (serverless, or turned off when idle): the bill at 100% utilization.
VIEWS = ("fully loaded", "busy")


def usd_per_million_tokens(usd_per_hour: float, tokens_per_second: float, busy: float = 1.0,
                           idle_paid: bool = True) -> float:
    """What 1M tokens cost on an instance producing ``tokens_per_second`` while busy ``busy`` of the time.

    ``idle_paid`` (fully loaded): the idle hours are paid too, so the price is divided by ``busy``;
    otherwise (busy view) only busy hours are paid and ``busy`` does not matter. A free instance costs $0.
    """
    if usd_per_hour < 0 or tokens_per_second <= 0 or not 0 < busy <= 1:
        raise ConfigError("usd_per_hour must be >= 0, tokens_per_second > 0 and busy in (0, 1]")
    return usd_per_hour / (tokens_per_second * 3600 * (busy if idle_paid else 1.0)) * 1e6


def payback_months(purchase_usd: float, cloud_usd_per_hour: float, power_kw: float, usd_per_kwh: float,
                   busy: float = 1.0, hours_per_month: float = 730, idle_paid: bool = True) -> Optional[float]:
    """Months until owning a GPU beats renting it; None if it never does.

    The same idle rule as :func:`usd_per_million_tokens`: ``idle_paid`` (fully loaded) rents the cloud
    GPU all ``hours_per_month``, busy or idle; otherwise (busy view) only the busy hours are rented.
    On-prem power is paid for the busy hours (kW x $/kWh); idle power, space and staff are not counted.
    """
    rented = hours_per_month * (1.0 if idle_paid else busy)
    saving = rented * cloud_usd_per_hour - hours_per_month * busy * power_kw * usd_per_kwh
    if saving <= 0:
        return None
    return purchase_usd / saving


def num(x: float) -> str:
    """An integer with thousands separators, or 4 significant digits: never float noise.

    From 1,000 up a value prints as a rounded integer; beyond 10**15 in scientific notation.
    """
    x = float(x)
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    if abs(x) >= 1e15:
        return f"{x:.4g}"
    if x.is_integer() or abs(x) >= 1000:
        return f"{round(x):,}"
    return f"{x:.4g}"


def human_bytes(n: float) -> str:
    """Binary and decimal units side by side: ``327,680 B = 320 KiB = 0.3277 MB``."""
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    v, i = float(n), 0
    while abs(v) >= 1024 and i < len(units) - 1:
        v /= 1024
        i += 1
    dec_units = [("EB", 1e18), ("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)]
    unit, scale = next(((u, s) for u, s in dec_units if abs(n) >= s), ("MB", 1e6))
    return f"{num(n)} B = {num(v)} {units[i]} = {num(n / scale)} {unit}"
