"""``ragcost plan``: KV cache, sequences per GPU, index RAM, $ per 1M tokens, on-prem payback; inputs beside results.

GB in options means 10**9 bytes (nvidia-smi's MiB x 1.048576 / 1000); results print bytes, binary and decimal units.
Every number is checked against its range before anything is computed: an out-of-range value is
exit 2 and one line naming the option, the value and the range. 0 is allowed only where it means
free (a price, power, electricity).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from ragcost.cost import capacity as C
from ragcost.cost import plan as P
from ragcost.errors import ConfigError

GB = 1e9
MEM_UTILIZATION = 0.9  # vLLM's gpu_memory_utilization default
BUSY = 1.0
INSTANCE = "r7i-2xlarge"


def _range(lo: float, hi: float, lo_open: bool = False) -> Callable[[Any], Any]:
    """A typer callback refusing a value outside [lo, hi] (or (lo, hi]), NaN and infinity with one line."""
    allowed = f"{'(' if lo_open else '['}{P.num(lo)}, {P.num(hi)}]"

    def check(value: Any) -> Any:
        if value is None:
            return value
        bad = not math.isfinite(value) or value > hi or (value <= lo if lo_open else value < lo)
        if bad:
            raise typer.BadParameter(f"{value!r} is out of range; allowed {allowed}")
        return value

    return check


def _choice(options: tuple[str, ...]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is not None and value not in options:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(options)}")
        return value

    return check


def _split_utilization(value: Optional[float]) -> None:
    if value is not None:
        raise typer.BadParameter("was split in two: use --mem-utilization (share of GPU memory, default 0.9) "
                                 "and --busy (share of the time the GPU is busy, default 1.0)")


def plan(
    model_config: Optional[Path] = typer.Option(None, "--model-config", help="A model's config.json (or its folder)."),
    layers: Optional[int] = typer.Option(None, "--layers", callback=_range(1, 10_000), help="num_hidden_layers (overrides the config), 1..10,000."),
    kv_heads: Optional[int] = typer.Option(None, "--kv-heads", callback=_range(1, 10_000), help="num_key_value_heads (overrides the config), 1..10,000."),
    head_dim: Optional[int] = typer.Option(None, "--head-dim", callback=_range(1, 65_536), help="head_dim (overrides the config), 1..65,536."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="KV/weights dtype: float16, bfloat16, float32, fp8, int8..."),
    gpu_mem_gb: Optional[float] = typer.Option(None, "--gpu-mem-gb", callback=_range(0, 1e6, lo_open=True), help="GPU memory, GB (1e9 bytes), > 0."),
    weights_gb: Optional[float] = typer.Option(None, "--weights-gb", callback=_range(0, 1e7, lo_open=True), help="Model weights, GB, > 0."),
    params_b: Optional[float] = typer.Option(None, "--params-b", callback=_range(0, 1e6, lo_open=True), help="Parameters, billions (weights = params x dtype bytes), > 0."),
    context: Optional[int] = typer.Option(None, "--context", callback=_range(1, 1e9), help="Tokens per sequence (prompt + output), >= 1."),
    mem_utilization: float = typer.Option(MEM_UTILIZATION, "--mem-utilization", callback=_range(0, 1, lo_open=True), help="Share of GPU memory vLLM may use (gpu_memory_utilization), (0, 1]."),
    busy: float = typer.Option(BUSY, "--busy", callback=_range(0, 1, lo_open=True), help="Share of the time the GPU is busy, (0, 1]: $/1M tokens and payback are shown fully loaded (idle hours paid) and busy-only."),
    utilization: Optional[float] = typer.Option(None, "--utilization", hidden=True, callback=_split_utilization),
    chunks: Optional[int] = typer.Option(None, "--chunks", callback=_range(1, 1e13), help="Vectors in the index, >= 1."),
    dim: Optional[int] = typer.Option(None, "--dim", callback=_range(1, 1_000_000), help="Embedding dimension, >= 1."),
    precision: str = typer.Option("float32", "--precision", callback=_choice(P.PRECISIONS), help="float32, float16, int8 or binary."),
    kind: str = typer.Option("flat", "--kind", help="flat, hnsw, ivf_flat, ivf_pq, or a kind of --backend; pgvector-hnsw is pgvector's hnsw (corpus mode)."),
    backend: Optional[str] = typer.Option(None, "--backend", help="The index backend whose kind --kind is (default: hnswlib for hnsw, faiss for the others); a plugin's backend is planned by the size it declares."),
    m: int = typer.Option(16, "--M", callback=_range(2, 1024), help="HNSW M, 2..1,024."),
    pq_m: Optional[int] = typer.Option(None, "--pq-m", callback=_range(1, 1_000_000), help="IVF-PQ sub-quantizers; must divide --dim."),
    nbits: int = typer.Option(8, "--nbits", callback=_range(1, 16), help="IVF-PQ bits per code, 1..16."),
    shards: Optional[int] = typer.Option(None, "--shards", callback=_range(1, 1e6), help="Corpus mode: index shards, 1..1,000,000."),
    replicas: Optional[int] = typer.Option(None, "--replicas", callback=_range(1, 1000), help="Corpus mode: copies of every shard, 1..1,000 (default 1)."),
    instance: Optional[str] = typer.Option(None, "--instance", help="Corpus mode: a time resource of the price book with ram_gib (default: the cheapest of them that holds the shards)."),
    pricing: Path = typer.Option(Path("pricing/default.yaml"), "--pricing", help="Corpus mode: the price book."),
    embed_per_second: float = typer.Option(C.EMBED_PER_SECOND, "--embed-per-second", callback=_range(0, 1e9, lo_open=True),
                                           help="Corpus mode: chunks one worker embeds per second; default measured by "
                                                "bench.embed (MiniLM, torch, one 2-core CPU)."),
    pipeline: Optional[Path] = typer.Option(None, "--pipeline", help="Corpus mode: an indexed pipeline: its chunks and dim (unless --chunks/--dim say otherwise, e.g. the corpus grown), its chunk store's bytes per chunk, and the embedding rate measured on a sample of its own chunks here."),
    chunk_bytes: Optional[float] = typer.Option(None, "--chunk-bytes", callback=_range(0, 1e9, lo_open=True), help="Corpus mode: the chunk store's bytes per chunk (text, ids, metadata, its vector); default: measured with --pipeline, else an estimate from SciFact's and Cranfield's stores plus the vector."),
    workers: Optional[int] = typer.Option(None, "--workers", callback=_range(1, 1e6), help="Corpus mode: 2-core embedding workers (default: the machines' vCPUs / 2)."),
    gpu_usd_per_hour: Optional[float] = typer.Option(None, "--gpu-usd-per-hour", callback=_range(0, 1e6), help="Cloud GPU $/h; 0 = free."),
    tokens_per_second: Optional[float] = typer.Option(None, "--tokens-per-second", callback=_range(0, 1e12, lo_open=True), help="Measured or expected throughput while busy, > 0."),
    purchase_usd: Optional[float] = typer.Option(None, "--purchase-usd", callback=_range(0, 1e12), help="On-prem GPU purchase price; 0 = free."),
    power_kw: Optional[float] = typer.Option(None, "--power-kw", callback=_range(0, 1e6), help="On-prem power draw while busy, kW; 0 = free."),
    usd_per_kwh: Optional[float] = typer.Option(None, "--usd-per-kwh", callback=_range(0, 1e3), help="Electricity price; 0 = free."),
) -> None:
    """Capacity and cost arithmetic for a model, a GPU and an index, printing every input beside its result."""
    from rich.console import Console

    if pq_m is not None and dim is not None and dim % pq_m:
        raise typer.BadParameter(f"{pq_m} does not divide --dim {dim}; use a divisor of {dim}, e.g. {_divisor(dim)}",
                                 param_hint="'--pq-m'")
    if shards is not None and chunks is not None and shards > chunks:
        raise typer.BadParameter(f"{shards:,} shards for {chunks:,} vector(s) (--chunks) would leave shards empty, each "
                                 f"still paid for; give --shards from 1 to {chunks:,}", param_hint="'--shards'")
    _check_kind(backend, kind)
    measured = None
    if pipeline is not None:
        measured = _measure_pipeline(pipeline)
        chunks = chunks if chunks is not None else measured.chunks
        dim = dim if dim is not None else measured.dim
        if chunk_bytes is None:
            chunk_bytes = measured.store_bytes_per_chunk
        if embed_per_second == C.EMBED_PER_SECOND:  # not given: the user's own chunks, measured here
            embed_per_second = measured.chunks_per_second
    _require_pairs(chunks=chunks, dim=dim, tokens_per_second=tokens_per_second, gpu_usd_per_hour=gpu_usd_per_hour,
                   purchase_usd=purchase_usd, power_kw=power_kw, usd_per_kwh=usd_per_kwh)
    out: list[tuple[str, str, str]] = []  # (what, result, inputs)
    out += _kv_lines(model_config, layers, kv_heads, head_dim, dtype, gpu_mem_gb, weights_gb, params_b, context,
                     mem_utilization)
    corpus = shards is not None or replicas is not None or kind == "pgvector-hnsw" or pipeline is not None
    if corpus:
        if chunks is None or dim is None:
            raise ConfigError("corpus mode (--shards/--replicas/--kind pgvector-hnsw) needs --chunks and --dim, or --pipeline")
        if shards is not None and shards > chunks:
            raise typer.BadParameter(f"{shards:,} shards for {chunks:,} vector(s) would leave shards empty, each still "
                                     f"paid for; give --shards from 1 to {chunks:,}", param_hint="'--shards'")
        out += _corpus_lines(chunks, dim, kind, shards or 1, replicas or 1, instance, pricing, m, pq_m, nbits,
                             embed_per_second, workers, chunk_bytes, measured, pipeline, backend)
    elif chunks is not None and dim is not None:
        out.append(_index_line(chunks, dim, precision, kind, m, pq_m, nbits, backend))
    # One idle rule for both figures, shown both ways (ragcost.cost.plan.VIEWS): fully loaded first.
    if gpu_usd_per_hour is not None and tokens_per_second is not None:
        for view, paid in (("fully loaded", True), ("busy", False)):
            u = P.usd_per_million_tokens(gpu_usd_per_hour, tokens_per_second, busy, idle_paid=paid)
            out.append((f"$ per 1M tokens ({view})", f"${P.num(u)}",
                        f"${P.num(gpu_usd_per_hour)}/h, {P.num(tokens_per_second)} tokens/s, busy {P.num(busy)} of the time; "
                        + _IDLE[view]))
    if purchase_usd is not None and gpu_usd_per_hour is not None:
        for view, paid in (("fully loaded", True), ("busy", False)):
            out.append(_payback_line(purchase_usd, gpu_usd_per_hour, power_kw, usd_per_kwh, busy, view, paid))
    if not out:
        raise ConfigError(
            "nothing to plan: give --model-config or --layers/--kv-heads/--head-dim (KV cache), with --gpu-mem-gb "
            "--context --weights-gb|--params-b (sequences), --chunks --dim (index RAM), --gpu-usd-per-hour "
            "--tokens-per-second ($/1M tokens), --purchase-usd --power-kw --usd-per-kwh (payback)")
    from rich.markup import escape

    console = Console(soft_wrap=True)
    for what, result, inputs in out:
        console.print(f"[bold]{what}[/bold]: {escape(result)}    [dim]<- {escape(inputs)}[/dim]", highlight=False)


def _divisor(dim: int) -> int:
    return next((d for d in (dim // 8, dim // 4, dim // 2, 1) if d and dim % d == 0), 1)


def _require_pairs(**given: Any) -> None:
    """An option whose partner is missing would print nothing for it: say which partner to add."""
    groups = [(("chunks", "dim"), "index RAM"), (("tokens_per_second", "gpu_usd_per_hour"), "$ per 1M tokens"),
              (("purchase_usd", "power_kw", "usd_per_kwh", "gpu_usd_per_hour"), "on-prem payback")]
    for names, what in groups:
        present = [n for n in names if given[n] is not None]
        if names[-1] == "gpu_usd_per_hour" and present == ["gpu_usd_per_hour"]:
            if given["tokens_per_second"] is None:
                raise ConfigError("--gpu-usd-per-hour needs --tokens-per-second ($ per 1M tokens) or --purchase-usd "
                                  "--power-kw --usd-per-kwh (on-prem payback)")
            continue  # the GPU price alone serves $ per 1M tokens
        if present and len(present) < len(names):
            missing = ", ".join("--" + n.replace("_", "-") for n in names if given[n] is None)
            raise ConfigError(f"{what} needs {missing} as well (given: "
                              f"{', '.join('--' + n.replace('_', '-') for n in present)})")


def _kv_lines(model_config: Optional[Path], layers: Optional[int], kv_heads: Optional[int], head_dim: Optional[int],
              dtype: Optional[str], gpu_mem_gb: Optional[float], weights_gb: Optional[float], params_b: Optional[float],
              context: Optional[int], mem_utilization: float) -> list[tuple[str, str, str]]:
    given = frozenset(k for k, v in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim)) if v is not None)
    shape: dict = P.model_shape_from_config(model_config, given) if model_config else {}
    for key, val in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim), ("dtype", dtype)):
        if val is not None:
            shape[key] = val
    shape.setdefault("dtype", "float16")
    bpv = P.dtype_bytes(shape["dtype"])
    have_shape = all(k in shape for k in ("layers", "kv_heads", "head_dim"))
    if not have_shape:
        given = [o for o, v in (("--layers", layers), ("--kv-heads", kv_heads), ("--head-dim", head_dim),
                                ("--gpu-mem-gb", gpu_mem_gb), ("--context", context)) if v is not None]
        if given:
            raise ConfigError(f"the KV cache needs --layers, --kv-heads and --head-dim (or --model-config); "
                              f"given only {', '.join(given)}")
        return []
    kv = P.kv_bytes_per_token(shape["layers"], shape["kv_heads"], shape["head_dim"], bpv)
    src = f" from {model_config}" if model_config else ""
    out = [("KV cache per token", P.human_bytes(kv),
            f"2 x layers {shape['layers']} x kv_heads {shape['kv_heads']} x head_dim {shape['head_dim']} "
            f"x {shape['dtype']} {P.num(bpv)} B{src}")]
    if context is not None:
        out.append(("KV cache per sequence", P.human_bytes(kv * context), f"context {P.num(context)} tokens"))
    if gpu_mem_gb is None:
        return out
    if context is None:
        raise ConfigError("sequences per GPU need --context (tokens per sequence) with --gpu-mem-gb")
    if weights_gb is None and params_b is None:
        raise ConfigError("sequences per GPU need the weights: give --weights-gb or --params-b")
    weights = weights_gb * GB if weights_gb is not None else params_b * 1e9 * bpv
    wsrc = f"weights {P.num(weights_gb)} GB" if weights_gb is not None else f"{P.num(params_b)}B params x {P.num(bpv)} B"
    n = P.sequences_that_fit(gpu_mem_gb * GB, weights, kv, context, mem_utilization)
    out.append(("Sequences that fit", P.num(n),
                f"GPU {P.num(gpu_mem_gb)} GB x mem-utilization {P.num(mem_utilization)} - {wsrc} "
                f"({P.human_bytes(weights)}), context {P.num(context)}; activations not counted"))
    return out


def _check_kind(backend: Optional[str], kind: str) -> None:
    """Exit 2 naming --backend or --kind when the backend is not installed or has no such kind."""
    from ragcost.errors import UnknownNameError
    from ragcost.index.check import kind_spec

    if kind in C.ALIASES and backend is None:
        return
    try:
        kind_spec(backend, kind)
    except UnknownNameError as e:
        raise typer.BadParameter(str(e), param_hint="'--backend'") from None
    except ConfigError as e:
        raise typer.BadParameter(f"{kind!r}: {e}" + ("" if backend else "; or --kind pgvector-hnsw (corpus mode)"),
                                 param_hint="'--kind'") from None


def _shape(backend: Optional[str], kind: str, m: int, pq_m: Optional[int], nbits: int) -> str:
    """The index as its options describe it: "hnswlib M 16", "faiss IVF-PQ m 48 x 8 bits", "mine flat"."""
    name, base = C.backend_kind(kind, backend)
    if base == "ivf_pq":
        return f"{name} IVF-PQ m {pq_m} x {nbits} bits"
    return f"{name} {base}" + (f" m {m}" if name == "pgvector" and base == "hnsw" else f" M {m}" if base == "hnsw" else "")


def _index_line(chunks: int, dim: int, precision: str, kind: str, m: int, pq_m: Optional[int],
                nbits: int, backend: Optional[str] = None) -> tuple[str, str, str]:
    ram, own = P.index_ram_bytes(chunks, dim, precision, kind, M=m, pq_m=pq_m, nbits=nbits, backend=backend)
    extra = {"hnsw": f", M {m}", "ivf_pq": f", pq_m {P.num(pq_m or 0)}, nbits {nbits}"}.get(kind, "")
    if backend is not None:
        extra = f" ({backend}){extra}"
    copy = ram - own
    copy_note = f" + exact-scan copy {P.num(copy)} B (float32)" if copy else ""
    return ("Index RAM", P.human_bytes(ram),
            f"{P.num(chunks)} chunks x dim {dim} x {precision}, {kind}{extra}: index {P.num(own)} B{copy_note}, "
            f"by the storage formula query and eval charge")


def _measure_pipeline(path: Path) -> Any:
    """The indexed pipeline's chunks, dim, store bytes and an embedding rate measured on its own chunks."""
    from ragcost.runtime.index_estimate import measure_stored
    from ragcost.runtime.pipeline import Pipeline

    pipe = Pipeline.load(path, judge=False)
    try:
        return measure_stored(pipe)
    finally:
        pipe.close()


def _corpus_lines(chunks: int, dim: int, kind: str, shards: int, replicas: int, instance: Optional[str], pricing: Path,
                  m: int, pq_m: Optional[int], nbits: int, embed_per_second: float,
                  workers: Optional[int], chunk_bytes: Optional[float] = None, measured: Any = None,
                  pipeline: Optional[Path] = None, backend: Optional[str] = None) -> list[tuple[str, str, str]]:
    from ragcost.cost.pricebook import TimeResource, load_price_book

    book = load_price_book(pricing)

    def planned(name: str, res: TimeResource) -> C.ShardPlan:
        return C.plan_corpus(chunks, dim, kind, shards, replicas, res.ram_gib * 2**30, res.usd_per_hour, M=m, pq_m=pq_m,
                             nbits=nbits, embed_per_second=embed_per_second, workers=workers, vcpus=res.vcpus,
                             store_bytes_per_chunk=chunk_bytes, backend=backend)

    if instance is not None:
        res = book.resource(instance, str(pricing))
        if not isinstance(res, TimeResource) or res.ram_gib is None:
            raise ConfigError(f"{pricing}: resources.{instance} has no ram_gib; give --instance a time resource with "
                              f"ram_gib (e.g. {INSTANCE}) or add ram_gib to it")
        p, why = planned(instance, res), "as given (--instance)"
    else:
        instance, res, p, why = _cheapest(book, pricing, planned)
    shape = _shape(backend, kind, m, pq_m, nbits)
    name, base = C.backend_kind(kind, backend)
    from ragcost.index.check import kind_spec

    checked = kind_spec(name, base).size_source
    days = p.embed_seconds / 86400
    return [
        ("Vectors per shard", P.num(p.vectors_per_shard),
         f"{P.num(chunks)} chunks / {shards} shard(s), dim {dim}, float32, {shape}"),
        ("RAM per shard", P.human_bytes(p.ram_bytes),
         f"index {P.num(p.index_bytes)} B ({P.num(p.index_bytes / p.vectors_per_shard)} B/vector, "
         + (f"{checked} checks it)" if checked else f"the formula backend {name} declares, unchecked here)") + ("" if p.ram_bytes == p.index_bytes else f" + float32 exact-scan copy {P.num(p.ram_bytes - p.index_bytes)} B")),
        ("Disk per shard", P.human_bytes(p.disk_bytes),
         "index + float32 vectors + int64 labels" + (" + the vector column in the chunk table" if C.in_store(name) else "")),
        ("Machines", f"{p.machines} x {instance}",
         f"{res.ram_gib:g} GiB each, {C.USABLE_RAM:.0%} usable (the rest is headroom for the OS, the query process "
         f"and the page cache): {p.shards_per_machine} shard(s) per machine, x {replicas} replica(s); {why}"),
        ("$ per month", f"${P.num(p.usd_per_month)}",
         f"{p.machines} x ${P.num(res.usd_per_hour)}/h x {C.HOURS_PER_MONTH} h ({pricing})"),
        ("Chunk store", P.human_bytes(p.store_bytes),
         f"{P.num(chunks)} chunks x {P.num(p.store_bytes / chunks)} B (texts, ids, metadata, each chunk's vector), one "
         f"store for all shards; " + (f"measured in {pipeline}'s store ({P.num(measured.chunks)} chunks, "
                                      f"{P.num(measured.store_bytes)} B)" if measured is not None and chunk_bytes == measured.store_bytes_per_chunk
                                      else "as given (--chunk-bytes)" if chunk_bytes is not None
                                      else f"estimated: {C.CHUNK_ROW_BYTES:,} B a row (SciFact's and Cranfield's stores) "
                                           f"+ {4 * dim:,} B of float32 vector; --pipeline measures yours")),
        ("Embedding time", f"{P.num(p.embed_seconds / 3600)} h = {P.num(days)} days",
         f"{P.num(chunks)} chunks / ({P.num(embed_per_second)} chunks/s per 2-core worker x {p.workers} worker(s))"
         + (f"; the rate measured here ({os.cpu_count()} cores) on {measured.sample} of {pipeline}'s own chunks "
            f"({P.num(measured.sample_seconds)} s)"
            if measured is not None and embed_per_second == measured.chunks_per_second else "")),
    ]


def _cheapest(book: Any, pricing: Path, planned: Callable[[str, Any], Any]) -> tuple[str, Any, Any, str]:
    """(name, resource, plan, why) of the book's time resource with ram_gib whose machines cost least a month for
    these shards (fewer machines on a tie); a 64 GiB machine was picked for a 1.65 GiB shard at 6x the price."""
    from ragcost.cost.pricebook import TimeResource

    sized = [(n, r) for n, r in book.resources.items() if isinstance(r, TimeResource) and r.ram_gib is not None]
    if not sized:
        raise ConfigError(f"{pricing}: no resource has ram_gib; add ram_gib to the instance the index runs on, or "
                          f"give --instance")
    fits, refused = [], []
    for name, res in sized:
        try:
            fits.append((name, res, planned(name, res)))
        except ConfigError as e:
            refused.append((res.ram_gib, name, str(e)))
    if not fits:
        ram, name, why = max(refused)
        raise ConfigError(f"no instance of {pricing} holds a shard; the largest, {name}: {why}")
    fits.sort(key=lambda f: (f[2].usd_per_month, f[2].machines, f[0]))
    name, res, p = fits[0]
    others = "; ".join(f"{n} ${P.num(q.usd_per_month)}" for n, _, q in fits[1:])
    why = (f"the cheapest of the {len(sized)} instance(s) with ram_gib in the book that hold(s) the shards"
           + (f" (also: {others})" if others else "")
           + (f"; too small: {', '.join(n for _, n, _ in sorted(refused))}" if refused else ""))
    return name, res, p, why


_IDLE = {"fully loaded": "idle hours paid (the instance stays on)",
         "busy": "only busy hours paid (serverless, or off when idle)"}


def _payback_line(purchase_usd: float, gpu_usd_per_hour: float, power_kw: Optional[float],
                  usd_per_kwh: Optional[float], busy: float, view: str = "fully loaded",
                  idle_paid: bool = True) -> tuple[str, str, str]:
    rented = "all 730 h/month" if idle_paid else f"its busy {P.num(busy)} of 730 h/month"
    inputs = (f"${P.num(purchase_usd)} purchase vs renting the cloud GPU at ${P.num(gpu_usd_per_hour)}/h for {rented}; "
              f"{P.num(power_kw or 0)} kW x ${P.num(usd_per_kwh or 0)}/kWh while busy {P.num(busy)} of the time; "
              + _IDLE[view])
    what = f"On-prem payback ({view})"
    if gpu_usd_per_hour == 0:
        return (what, "n/a, the GPU is free", inputs)
    months = P.payback_months(purchase_usd, gpu_usd_per_hour, power_kw or 0.0, usd_per_kwh or 0.0, busy, idle_paid=idle_paid)
    res = "never (power costs as much as the cloud or more)" if months is None else f"{P.num(months)} months"
    return (what, res, inputs)
