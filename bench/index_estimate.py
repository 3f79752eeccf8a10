"""`ragcost index --dry-run`'s estimate against the run it estimates; prints JSON.

``python -m bench.index_estimate [--dataset scifact] [--data ../shared/data] [--pipeline pipelines/scifact.yaml]
[--docs N]``

Copies the pipeline into a temporary folder with a fresh store and index folder over the BEIR dataset's corpus
(its first ``--docs`` documents when given), takes the dry run's estimate (counts, the sample's measured time,
dollars), then runs `ragcost index`'s library call and compares: the chunks (and the grounded check's sentences,
when the pipeline has that check) estimated against embedded, and the estimated embedding seconds against the
real ones. The issue's target: the time within 25% on SciFact's corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(dataset: Path, pipeline: Path, docs: int | None, folder: Path) -> dict:
    import yaml

    from ragcost.runtime.index_estimate import estimate_index
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline

    source = dataset
    if docs:  # the first N documents, as a BEIR folder of their own
        import gzip
        import shutil

        source = folder / "data" / dataset.name
        source.mkdir(parents=True)
        gz = dataset / "corpus.jsonl.gz"
        with (gzip.open(gz, "rt", encoding="utf-8") if gz.exists() else open(dataset / "corpus.jsonl", encoding="utf-8")) as f, \
                open(source / "corpus.jsonl", "w", encoding="utf-8") as g:
            for i, line in enumerate(f):
                if i >= docs:
                    break
                g.write(line)
        for name in ("queries.jsonl", "qrels.tsv"):
            shutil.copyfile(dataset / name, source / name)
    cfg = yaml.safe_load(pipeline.read_text())
    cfg.update(store=f"duckdb:///{folder / 'store.duckdb'}", index_dir=str(folder / "index"),
               source={"path": str(source), "reader": "beir"}, pricing=str(REPO / "pricing" / "default.yaml"))
    if isinstance(cfg.get("index"), str):
        cfg["index"] = str((pipeline.parent / cfg["index"]).resolve())
    path = folder / "pipe.yaml"
    path.write_text(json.dumps(cfg))
    pipe = Pipeline.load(path)
    try:
        est = estimate_index(pipe)
        summary = run_index(pipe)
    finally:
        pipe.close()
    out = {
        "dataset": dataset.name, "documents": est.documents,
        "chunks": {"estimated": est.chunks.texts, "embedded": summary.embedded_chunks,
                   "sample": est.chunks.sample, "sample_seconds": round(est.chunks.sample_seconds, 3),
                   "estimated_seconds": round(est.chunks.seconds, 2), "real_seconds": round(summary.embed_seconds, 2),
                   "ratio": round(est.chunks.seconds / summary.embed_seconds, 3) if summary.embed_seconds else None},
        "usd_estimated": est.usd,
        "load_avg_1m": os.getloadavg()[0],
        "target": "estimated / real embedding seconds within 0.75-1.25",
    }
    if est.sentences is not None:
        out["sentences"] = {"estimated": est.sentences.texts, "embedded": summary.sentences_embedded,
                            "estimated_seconds": round(est.sentences.seconds, 2),
                            "real_seconds": round(summary.sentence_seconds, 2),
                            "ratio": round(est.sentences.seconds / summary.sentence_seconds, 3) if summary.sentence_seconds else None}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="scifact")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--pipeline", type=Path, default=REPO / "pipelines" / "scifact.yaml")
    ap.add_argument("--docs", type=int, default=None, help="only the corpus's first N documents")
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        json.dump(run(a.data / a.dataset, a.pipeline, a.docs, Path(tmp)), sys.stdout, indent=1)
        sys.stdout.write("\n")


if __name__ == "__main__":
    main()
