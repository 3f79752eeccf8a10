"""``ragcost plan``: KV cache, sequences per GPU, index RAM, $ per 1M tokens, on-prem payback; inputs beside results.

GB in options means 10**9 bytes (nvidia-smi's MiB x 1.048576 / 1000); results print bytes, binary and decimal units.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ragcost.cost import plan as P
from ragcost.errors import ConfigError

GB = 1e9


def plan(
    model_config: Optional[Path] = typer.Option(None, "--model-config", help="A model's config.json (or its folder)."),
    layers: Optional[int] = typer.Option(None, "--layers", help="num_hidden_layers (overrides the config)."),
    kv_heads: Optional[int] = typer.Option(None, "--kv-heads", help="num_key_value_heads (overrides the config)."),
    head_dim: Optional[int] = typer.Option(None, "--head-dim", help="head_dim (overrides the config)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="KV/weights dtype: float16, bfloat16, float32, fp8, int8..."),
    gpu_mem_gb: Optional[float] = typer.Option(None, "--gpu-mem-gb", help="GPU memory, GB (1e9 bytes)."),
    weights_gb: Optional[float] = typer.Option(None, "--weights-gb", help="Model weights, GB."),
    params_b: Optional[float] = typer.Option(None, "--params-b", help="Parameters, billions (weights = params x dtype bytes)."),
    context: Optional[int] = typer.Option(None, "--context", help="Tokens per sequence (prompt + output)."),
    utilization: float = typer.Option(0.9, "--utilization", help="Fraction of GPU memory (vLLM gpu_memory_utilization) / of time busy."),
    chunks: Optional[int] = typer.Option(None, "--chunks", help="Vectors in the index."),
    dim: Optional[int] = typer.Option(None, "--dim", help="Embedding dimension."),
    precision: str = typer.Option("float32", "--precision", help="float32, float16, int8 or binary."),
    kind: str = typer.Option("flat", "--kind", help="flat, hnsw, ivf_flat or ivf_pq."),
    m: int = typer.Option(16, "--M", help="HNSW M."),
    pq_m: Optional[int] = typer.Option(None, "--pq-m", help="IVF-PQ sub-quantizers."),
    nbits: int = typer.Option(8, "--nbits", help="IVF-PQ bits per code."),
    gpu_usd_per_hour: Optional[float] = typer.Option(None, "--gpu-usd-per-hour", help="Cloud GPU $/h."),
    tokens_per_second: Optional[float] = typer.Option(None, "--tokens-per-second", help="Measured or expected throughput while busy."),
    purchase_usd: Optional[float] = typer.Option(None, "--purchase-usd", help="On-prem GPU purchase price."),
    power_kw: Optional[float] = typer.Option(None, "--power-kw", help="On-prem power draw while busy, kW."),
    usd_per_kwh: Optional[float] = typer.Option(None, "--usd-per-kwh", help="Electricity price."),
) -> None:
    """Capacity and cost arithmetic for a model, a GPU and an index, printing every input beside its result."""
    from rich.console import Console

    out: list[tuple[str, str, str]] = []  # (what, result, inputs)
    shape: dict = P.model_shape_from_config(model_config) if model_config else {}
    for key, val in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim), ("dtype", dtype)):
        if val is not None:
            shape[key] = val
    shape.setdefault("dtype", "float16")
    bpv = P.dtype_bytes(shape["dtype"])
    kv = None
    if all(k in shape for k in ("layers", "kv_heads", "head_dim")):
        kv = P.kv_bytes_per_token(shape["layers"], shape["kv_heads"], shape["head_dim"], bpv)
        src = f" from {model_config}" if model_config else ""
        out.append(("KV cache per token", P.human_bytes(kv),
                    f"2 x layers {shape['layers']} x kv_heads {shape['kv_heads']} x head_dim {shape['head_dim']} "
                    f"x {shape['dtype']} {bpv:g} B{src}"))
        if context:
            out.append(("KV cache per sequence", P.human_bytes(kv * context), f"context {context:,} tokens"))
    if gpu_mem_gb and context and kv is not None:
        if weights_gb is None and params_b is None:
            raise ConfigError("sequences per GPU need the weights: give --weights-gb or --params-b")
        weights = weights_gb * GB if weights_gb is not None else params_b * 1e9 * bpv
        wsrc = f"weights {weights_gb:g} GB" if weights_gb is not None else f"{params_b:g}B params x {bpv:g} B"
        n = P.sequences_that_fit(gpu_mem_gb * GB, weights, kv, context, utilization)
        out.append(("Sequences that fit", f"{n:,}",
                    f"GPU {gpu_mem_gb:g} GB x utilization {utilization:g} - {wsrc} ({P.human_bytes(weights)}), "
                    f"context {context:,}; activations not counted"))
    if chunks and dim:
        ram = P.index_ram_bytes(chunks, dim, precision, kind, M=m, pq_m=pq_m, nbits=nbits)
        extra = {"hnsw": f", M {m}", "ivf_pq": f", pq_m {pq_m}, nbits {nbits}"}.get(kind, "")
        out.append(("Index RAM", P.human_bytes(ram), f"{chunks:,} chunks x dim {dim} x {precision}, {kind}{extra}"))
    if gpu_usd_per_hour and tokens_per_second:
        u = P.usd_per_million_tokens(gpu_usd_per_hour, tokens_per_second, utilization)
        out.append(("$ per 1M tokens", f"${u:,.4f}",
                    f"${gpu_usd_per_hour:g}/h, {tokens_per_second:,g} tokens/s, busy {utilization:g} of the time"))
    if purchase_usd is not None and gpu_usd_per_hour and power_kw is not None and usd_per_kwh is not None:
        months = P.payback_months(purchase_usd, gpu_usd_per_hour, power_kw, usd_per_kwh, utilization)
        res = "never (power costs more than the cloud)" if months is None else f"{months:,.1f} months"
        out.append(("On-prem payback", res,
                    f"${purchase_usd:,.0f} purchase vs cloud ${gpu_usd_per_hour:g}/h; {power_kw:g} kW x "
                    f"${usd_per_kwh:g}/kWh; busy {utilization:g} of 730 h/month"))
    if not out:
        raise ConfigError(
            "nothing to plan: give --model-config or --layers/--kv-heads/--head-dim (KV cache), with --gpu-mem-gb "
            "--context --weights-gb|--params-b (sequences), --chunks --dim (index RAM), --gpu-usd-per-hour "
            "--tokens-per-second ($/1M tokens), --purchase-usd --power-kw --usd-per-kwh (payback)")
    console = Console(soft_wrap=True)
    for what, result, inputs in out:
        console.print(f"[bold]{what}[/bold]: {result}    [dim]<- {inputs}[/dim]", highlight=False)
