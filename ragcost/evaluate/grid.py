"""The embedding side of the eval grid: one corpus embedding per (embedder, chunking).

An eval spec may list ``embedders:`` (entries of the pipeline's ``embed:`` shape: type, model and
options) and ``chunking:`` (entries of the pipeline's ``chunking:`` shape). Each combination is a
*variant*: a copy of the pipeline with that embed and chunking, embedded once (and cached, keyed by
the embedder's fingerprint and the chunking) and measured against every index configuration of
the grid. Without either list the pipeline's own embed and chunking make the one variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragcost.config.pipeline import ChunkingConfig, EmbedConfig


@dataclass
class Variant:
    """One (embedder, chunking) of the grid and the pipeline that embeds with it."""

    label: str  # "" when the grid has one variant (names stay as they were)
    embed: EmbedConfig
    chunking: ChunkingConfig
    pipe: Any  # ragcost.runtime.pipeline.Pipeline

    def describe(self) -> dict[str, Any]:
        """The embed and chunking keys a pipeline YAML takes (what `ragcost tune --write` writes)."""
        return {"embed": _set(self.embed), "chunking": _set(self.chunking)}


def _set(model: Any) -> dict[str, Any]:
    return model.model_dump(exclude_unset=True, exclude_none=True)


def chunking_label(ch: ChunkingConfig, size: int) -> str:
    from ragcost.ingest.chunker import default_min_tail

    tail = "" if ch.tail == "none" else f" {ch.tail}{ch.min_tail or default_min_tail(size)}"
    title = "" if ch.title == ChunkingConfig.model_fields["title"].default else f" title-{ch.title}"
    return f"c{size}o{ch.overlap}{tail}{title}"


def embed_label(e: EmbedConfig) -> str:
    """``onnx``, ``onnx int8``, ``static pca256``, ``sentence-transformers bf16``, ``sentence-transformers:/models/e5``:
    what changes the vectors."""
    label = e.type if e.model == EmbedConfig().model else f"{e.type}:{e.model}"
    if e.onnx is not None and e.onnx.quantize != "none":
        label += f" {e.onnx.quantize}"
    if e.static is not None:
        label += f" pca{e.static.pca_dims}" if e.static.pca_dims else " no-pca"
    if e.dtype != "float32":
        label += " bf16" if e.dtype == "bfloat16" else f" {e.dtype}"
    return label


# embed keys that belong to one runtime (type): they do not carry over to another type
RUNTIME_OPTIONS = ("onnx", "static", "dtype")


def merge_embed(base: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """``own``'s embed keys over ``base``'s; ``base``'s runtime options (``onnx:``, ``static:``, ``dtype``)
    carry over only when ``own`` keeps its type (a grid entry over the pipeline; a tune choice written back)."""
    default = EmbedConfig.model_fields["type"].default
    merged = dict(base)
    if own.get("type", base.get("type", default)) != base.get("type", default):
        for key in RUNTIME_OPTIONS:
            merged.pop(key, None)
    merged.update(own)
    return merged


def embed_entry(base: EmbedConfig, entry: EmbedConfig) -> EmbedConfig:
    """A grid entry over the pipeline's embed (:func:`merge_embed`), validated as a whole, so nested
    options are models, never the raw dicts ``model_copy`` would leave."""
    return EmbedConfig.model_validate(merge_embed(_set(base), _set(entry)))


def variants(spec: Any, pipe: Any) -> list[Variant]:
    """Every (embedder, chunking) of the spec, each with its pipeline; the embed dim and precision
    stay the grid's (vectors are cached at the model's native dim, float32)."""
    base_embed, base_chunk = pipe.config.embed, pipe.config.chunking
    embeds = [embed_entry(base_embed, e) for e in spec.embedders] if spec.embedders else [base_embed]
    chunks = list(spec.chunking) if spec.chunking else [base_chunk]
    many_e, many_c = len(embeds) > 1, len(chunks) > 1
    out = []
    loaded: dict[str, Any] = {}
    labels = [embed_label(e) for e in embeds]
    labels = [f"{lb} #{i + 1}" if labels.count(lb) > 1 else lb for i, lb in enumerate(labels)]  # names stay unique
    for e, e_label in zip(embeds, labels):
        for ch in chunks:
            vp = _variant_pipeline(pipe, e, ch, loaded)
            size, _ = vp.chunking()
            parts = ([e_label] if many_e else []) + ([chunking_label(ch, size)] if many_c else [])
            out.append(Variant(" ".join(parts), e, ch, vp))
    return out


def _variant_pipeline(pipe: Any, embed: EmbedConfig, chunking: ChunkingConfig, loaded: dict[str, Any]) -> Any:
    """The pipeline with this embed and chunking; one loaded model per distinct embed config."""
    from ragcost.runtime.load import LoadedPipeline
    from ragcost.runtime.pipeline import Pipeline

    if embed == pipe.config.embed and chunking == pipe.config.chunking:
        return pipe
    cfg = pipe.config.model_copy(update={"embed": embed, "chunking": chunking})
    vp = Pipeline(LoadedPipeline(cfg, pipe.path, pipe.raw, pipe.index_config, []))
    key = embed.model_dump_json()
    if embed == pipe.config.embed:
        loaded.setdefault(key, pipe.embedder)
    if key in loaded:
        vp.__dict__["embedder"] = loaded[key]  # a cached_property's slot: one model in memory
    else:
        loaded[key] = vp.embedder
    vp.__dict__["price_book"] = pipe.price_book
    return vp


def close_variants(vs: list[Variant], pipe: Any) -> None:
    """Close every variant's pipeline and the base one they were made from."""
    for v in vs:
        if v.pipe is not pipe:
            v.pipe.close()
    pipe.close()


def prefixed(label: str, name: str) -> str:
    return f"{label} | {name}" if label else name


def merge_variant(run: Any, vrun: Any, v: Variant) -> Any:
    """Label ``vrun``'s results with the variant and fold them into ``run`` (the first variant's header)."""
    d = v.describe()
    for r in vrun.results:
        r.name = prefixed(v.label, r.name)
        r.embed, r.chunking = d["embed"], d["chunking"]
    if run is None:
        return vrun
    run.results.extend(vrun.results)
    run.embedded_documents += vrun.embedded_documents
    run.embed_seconds += vrun.embed_seconds
    run.vectors_from_store += vrun.vectors_from_store
    run.warnings.extend(w for w in vrun.warnings if w not in run.warnings)
    return run
