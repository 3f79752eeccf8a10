"""ONNX Runtime embedder: the sentence-transformers model exported to ONNX at first use, optionally int8.

The export is the whole sentence-transformers forward (transformer, pooling, normalisation) traced
with ``torch.onnx.export``; int8 is ``onnxruntime.quantization.quantize_dynamic`` (weights int8 per
channel, activations quantised at run time), the call optimum's ORTQuantizer makes. optimum itself
is not used: optimum-onnx 0.1.0 requires transformers<4.58 and does not import with transformers 5.
Both files land in ``<cache>/onnx/<fingerprint[:16]>/``; nothing is downloaded.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ragcost.embed.base import embedder_registry
from ragcost.embed.cache import built_folder
from ragcost.embed.derived import DerivedEmbedder
from ragcost.errors import DependencyError

OPSET = 17
# The transformer is traced with its plain ("eager") attention, not torch's fused SDPA: traced SDPA becomes a
# graph whose int8 build ran at 71 texts/s on 60-word texts and 36 on 200-word ones here, the eager trace at
# 102 and 60-64 (torch: 58 and 36), with the same vectors (cosine with torch 0.993 mean either way).
ATTENTION = "eager"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise DependencyError("embed.type onnx needs onnxruntime: pip install 'ragcost[onnx]'") from None
    return onnxruntime


@embedder_registry.register("onnx")
class OnnxEmbedder(DerivedEmbedder):
    name = "onnx"
    runtime = "onnxruntime"

    def __init__(self, config, base: Path | None = None) -> None:
        super().__init__(config, base)
        self.quantize = config.onnx.quantize if config.onnx else "none"
        self._session: Any = None
        self._inputs: tuple[str, ...] = ()

    def options(self) -> dict[str, Any]:
        return {"exporter": "torch.onnx.export (TorchScript)", "opset": OPSET, "graph": "sentence_embedding",
                "attention": ATTENTION, "quantize": {"none": None, "int8": "quantize_dynamic QInt8 per-channel"}[self.quantize]}

    def warm_up(self) -> None:
        if self._session is not None:
            return
        ort = _onnxruntime()
        folder = built_folder("onnx", self.fingerprint()[:16], self._export)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        self._session = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        self._inputs = tuple(i.name for i in self._session.get_inputs())

    def _export(self, out: Path) -> dict[str, Any]:
        _onnxruntime()
        if self.quantize == "int8":
            try:
                from onnxruntime.quantization import QuantType, quantize_dynamic
            except ImportError:
                raise DependencyError("embed.onnx.quantize int8 needs onnx: pip install 'ragcost[onnx]'") from None
        try:
            model = self.load_source(attn_implementation=ATTENTION)
        except Exception as e:  # noqa: BLE001 - any reason is reported, naming the folder
            raise self.failed("loading", e) from None
        try:
            raw = out / ("model.fp32.onnx" if self.quantize == "int8" else "model.onnx")
            _trace(model, raw)
            if self.quantize == "int8":
                quantize_dynamic(str(raw), str(out / "model.onnx"), weight_type=QuantType.QInt8, per_channel=True)
                raw.unlink()
        except Exception as e:  # noqa: BLE001
            raise self.failed("exporting to ONNX", e) from None
        return {"source": str(self.path), **self.options()}

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        self.warm_up()
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_tokens, return_tensors="np")
        feed = {k: np.asarray(enc[k], dtype=np.int64) for k in self._inputs}
        out = np.asarray(self._session.run(None, feed)[0], dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return np.ascontiguousarray(out / norms)

    def embed(self, texts: list[str]) -> np.ndarray:
        # Like sentence-transformers: batches of similar length pad less; vectors come back in input order.
        if not texts:
            return np.zeros((0, self.native_dim), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        bs = self.config.batch_size
        parts = [self.embed_batch([texts[i] for i in order[j : j + bs]]) for j in range(0, len(texts), bs)]
        out = np.empty((len(texts), parts[0].shape[1]), dtype=np.float32)
        out[order] = np.vstack(parts)
        return out

    @property
    def native_dim(self) -> int:
        self.warm_up()
        width = self._session.get_outputs()[0].shape[-1]
        return width if isinstance(width, int) else int(self.embed_batch(["x"]).shape[1])


def _trace(model: Any, path: Path) -> None:
    """Export ``model``'s forward from token ids to ``sentence_embedding``, batch and length dynamic."""
    import torch

    class _Forward(torch.nn.Module):
        def __init__(self, st: Any, names: tuple[str, ...]) -> None:
            super().__init__()
            self.st, self.names = st, names

        def forward(self, *args: Any) -> Any:
            return self.st(dict(zip(self.names, args)))["sentence_embedding"]

    enc = model.tokenizer(["an example sentence", "a second, longer example sentence"], padding=True, return_tensors="pt")
    names = tuple(n for n in _INPUTS if n in enc)
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"sentence_embedding": {0: "batch"}}
    model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python-side shape checks: shapes stay dynamic
        torch.onnx.export(_Forward(model, names), tuple(enc[n] for n in names), str(path), input_names=list(names),
                          output_names=["sentence_embedding"], dynamic_axes=axes, opset_version=OPSET, dynamo=False)
