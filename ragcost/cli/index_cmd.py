"""`ragcost index PIPELINE [--source PATH] [--reader NAME] [--prune [--force]] [--ray ADDRESS] [--quiet] [--dry-run]`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def index(
    pipeline: Path = typer.Argument(..., help="pipeline YAML"),
    source: Optional[str] = typer.Option(None, "--source", help="file or folder to read instead of the pipeline's source"),
    reader: Optional[str] = typer.Option(None, "--reader", help="reader to use (jsonl, csv, parquet, folder, beir, pydoc-topics) instead of source.reader or the one the path implies"),
    prune: bool = typer.Option(False, "--prune", help="remove stored documents that are gone from the source (refused when the read skipped input, unless --force)"),
    force: bool = typer.Option(False, "--force", help="with --prune: delete even when the read skipped files or lines"),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="ADDRESS", help="embed on the Ray cluster at ADDRESS (host:port as `ray start --head` prints it, or auto) instead of the pipeline's executor"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress: only the summary, warnings and errors"),
    dry_run: bool = typer.Option(False, "--dry-run", help="say what would be embedded, how long it would take (measured on a sample) and what it would cost; write nothing"),
) -> None:
    """Read the source, embed only new or changed documents, and rebuild the index if anything changed."""
    from rich.console import Console

    from ragcost.cli.index_progress import BarProgress, LineProgress
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline

    if force and not prune:
        raise typer.BadParameter("--force only applies with --prune", param_hint="--force")
    console = Console(stderr=True)
    pipe = Pipeline.load(pipeline)
    if ray is not None:
        from ragcost.runtime.ray_executor import use_ray

        pipe.config = use_ray(pipe.config, ray)
    if dry_run:
        if prune or force:
            raise typer.BadParameter("--dry-run estimates the embedding; it does not prune", param_hint="--dry-run")
        try:
            _dry_run(pipe, source, reader)
        finally:
            pipe.close()
        return
    workers: dict[str, int] = {}
    try:
        if quiet:
            summary = run_index(pipe, source=source, prune=prune, reader=reader, force=force,
                                worker_progress=workers.__setitem__)
        elif console.is_terminal:
            with BarProgress(console) as bars:
                summary = run_index(pipe, source=source, prune=prune, reader=reader, force=force,
                                    worker_progress=bars.worker, phases=bars)
            workers = bars.workers
        else:
            lines = LineProgress(workers)
            summary = run_index(pipe, source=source, prune=prune, reader=reader, force=force,
                                worker_progress=lines.worker, phases=lines)
    finally:
        pipe.close()
    rep = summary.report
    if summary.re_embed_reason:
        typer.echo(f"note: {summary.re_embed_reason}")
    _read_lines(rep)
    for w in summary.warnings:
        typer.echo(f"warning: {w}")
    typer.echo(
        f"{summary.documents} documents read: {summary.embedded_documents} embedded ({summary.embedded_chunks} chunks, "
        f"{summary.embed_seconds:.1f}s), {summary.unchanged} unchanged, {summary.pruned} pruned"
    )
    if workers:
        typer.echo("embedded by " + ", ".join(f"{w}: {n} chunks" for w, n in sorted(workers.items())))
    if summary.index_built:
        typer.echo(
            f"index built: {pipe.index_config.backend}/{pipe.index_config.kind}"
            f"{f' in {summary.index_shards} shards' if summary.index_shards else ''}"
            f"{' on ray' if summary.shards_on_ray else ''}, {summary.vector_count} vectors, "
            f"{summary.index_bytes / 1e6:.1f} MB in memory, {summary.index_seconds:.2f}s -> {pipe.config.index_path}"
        )
    else:
        typer.echo(f"index up to date: {summary.vector_count} vectors at {pipe.config.index_path}")
    for line in summary.prepared:
        typer.echo(line)
    if summary.sentences:
        typer.echo(f"sentence vectors for the grounded check: {summary.sentences} ({summary.sentences_embedded} embedded, "
                   f"{summary.sentence_seconds:.1f}s, {summary.sentence_bytes / 1e6:.1f} MB)")


def _read_lines(rep) -> None:
    """What the source's read skipped, found twice, did not read or read once: the same lines for a run and a dry run."""
    if rep.skipped:
        typer.echo(f"warning: skipped {len(rep.skipped)} input(s): {rep.first_skipped()}")
    if rep.duplicates:
        typer.echo(f"warning: {len(rep.duplicates)} duplicate id(s) in the source, the last occurrence kept: " + ", ".join(rep.duplicates[:5]))
    for line in rep.id_clashes[:5]:
        typer.echo(f"warning: duplicate id: {line}")
    for line in rep.notes():
        typer.echo(f"note: {line}")


def _dry_run(pipe, source: Optional[str], reader: Optional[str]) -> None:
    """`index --dry-run`: the counts, the measured time and the dollars, one line each; nothing written."""
    from ragcost.cli.index_progress import duration
    from ragcost.runtime.index_estimate import estimate_index

    est = estimate_index(pipe, source=source, reader=reader)
    c, st = est.chunks, est.sentences
    typer.echo(f"dry run: nothing embedded or written ({pipe.config.embed.model} on {est.resource})")
    if est.re_embed_reason:
        typer.echo(f"note: {est.re_embed_reason}")
    if est.report is not None:
        _read_lines(est.report)
    typer.echo(f"documents: {est.documents} read, {est.unchanged} unchanged, {est.embed_documents} to embed")
    if c.texts:
        typer.echo(f"chunks: {c.texts} to embed ({c.tokens} tokens): about {duration(c.seconds)}, ${c.usd:.6f} "
                   f"(measured: {c.sample} of them in {c.sample_seconds:.2f}s, {c.sample_cpu_seconds:.2f} CPU-s)")
    else:
        typer.echo("chunks: none to embed")
    if st is not None:
        if st.texts:
            typer.echo(f"sentences for the grounded check: {st.texts} at most: about {duration(st.seconds)}, ${st.usd:.6f} "
                       f"(measured: {st.sample} of them in {st.sample_seconds:.2f}s); sentence_vectors: query embeds only "
                       "the cited passages' sentences, at query time (docs/guards.md)")
        else:
            typer.echo("sentences for the grounded check: none new")
    typer.echo(f"total: about {duration(est.seconds)}, ${est.usd:.6f}, then the index build and what stages keep "
               "beside it (seconds for most corpora); run without --dry-run to index")
