"""A BERT sentence encoder on torch alone, for a query process's cold start.

`ragcost query` embeds one query. Through sentence-transformers that first needs its import (torch,
transformers, scipy, sympy, pandas: 5.0 of the demo's 6.5 cold seconds here). A sentence-transformers folder
that is a BERT encoder with mean pooling and normalisation (all-MiniLM-L6-v2 and its kind) is small enough to
run directly: the weights from ``model.safetensors``, the tokenizer from ``tokenizer.json`` (the Rust
``tokenizers`` package), and BERT's forward written with the same torch operations Hugging Face's BertModel
runs (embeddings, then per layer scaled-dot-product attention, layer norm, GELU feed-forward), then the
mean over the real tokens and L2 normalisation. torch alone imports in about 1.2 s.

It is the same computation, not an approximation: the vectors equal sentence-transformers' to float
rounding (tests/embed/test_lean_bert.py checks 1e-5 on real texts, here at most 5e-7), so the query's
ranking does not change. A folder of any other kind (another architecture, pooling, or a model that
needs remote code) returns None from :func:`load` and is run by sentence-transformers as before.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

import numpy as np

_ST_MODULES = ["sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
               "sentence_transformers.models.Normalize"]


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def applies(folder: Path) -> Optional[str]:
    """None when ``folder`` is a BERT encoder with mean pooling and normalisation this module runs; else why not."""
    try:
        modules = [m.get("type") for m in _read(folder / "modules.json")]
        if modules != _ST_MODULES:
            return f"modules {modules}, not Transformer, Pooling, Normalize"
        cfg = _read(folder / "config.json")
        if cfg.get("model_type") != "bert" or cfg.get("position_embedding_type", "absolute") != "absolute":
            return f"model_type {cfg.get('model_type')!r}, not a BERT with absolute positions"
        if cfg.get("hidden_act") != "gelu":
            return f"hidden_act {cfg.get('hidden_act')!r}"
        pooling_dir = next((m["path"] for m in _read(folder / "modules.json") if m["type"].endswith("Pooling")), "")
        pool = _read(folder / pooling_dir / "config.json")
        modes = {k for k, v in pool.items() if k.startswith("pooling_mode") and v}
        if modes != {"pooling_mode_mean_tokens"}:
            return f"pooling {sorted(modes)}, not mean"
        for name in ("model.safetensors", "tokenizer.json", "sentence_bert_config.json"):
            if not (folder / name).is_file():
                return f"no {name}"
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as e:
        return f"unreadable ({type(e).__name__})"
    return None


class LeanBert:
    """``embed(texts)`` -> (n, hidden) float32, L2-normalised; ``count_tokens``; ``max_tokens``."""

    def __init__(self, folder: Path) -> None:
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        cfg = _read(folder / "config.json")
        self.max_tokens = int(_read(folder / "sentence_bert_config.json").get("max_seq_length") or 512)
        self.hidden = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        w = load_file(str(folder / "model.safetensors"))
        prefix = "bert." if any(k.startswith("bert.") for k in w) else ""
        self.w = {k[len(prefix):]: v.float() for k, v in w.items() if k.startswith(prefix)}
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tok.no_padding()
        tok.no_truncation()
        self._count = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._count.no_padding()
        self._count.no_truncation()
        tok.enable_truncation(max_length=self.max_tokens)
        tok.enable_padding(pad_id=int(cfg.get("pad_token_id", 0)))
        self.tok = tok
        self.torch = torch

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self._count.encode_batch(texts)]

    def _ln(self, x: Any, name: str) -> Any:
        return self.torch.nn.functional.layer_norm(x, (self.hidden,), self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps)

    def _lin(self, x: Any, name: str) -> Any:
        return self.torch.nn.functional.linear(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.hidden), dtype=np.float32)
        # Like sentence-transformers: longest first, so a batch pads little; vectors back in input order.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.hidden), dtype=np.float32)
        with self.torch.inference_mode():
            for j in range(0, len(texts), batch_size):
                idx = order[j:j + batch_size]
                out[idx] = self._batch([texts[i] for i in idx])
        return out

    def _batch(self, texts: list[str]) -> np.ndarray:
        torch, F = self.torch, self.torch.nn.functional
        enc = self.tok.encode_batch(texts)
        ids = torch.tensor([e.ids for e in enc], dtype=torch.long)
        types = torch.tensor([e.type_ids for e in enc], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in enc], dtype=torch.long)
        n, t = ids.shape
        pos = torch.arange(t, dtype=torch.long).unsqueeze(0)
        x = (F.embedding(ids, self.w["embeddings.word_embeddings.weight"])
             + F.embedding(types, self.w["embeddings.token_type_embeddings.weight"])
             + F.embedding(pos, self.w["embeddings.position_embeddings.weight"]))
        x = self._ln(x, "embeddings.LayerNorm")
        d = self.hidden // self.heads
        # additive mask as BertModel builds it for SDPA: 0 where a token is real, the dtype's minimum at padding
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def heads(y: Any) -> Any:
                return y.view(n, t, self.heads, d).transpose(1, 2)

            q = heads(self._lin(x, f"{p}.attention.self.query"))
            k = heads(self._lin(x, f"{p}.attention.self.key"))
            v = heads(self._lin(x, f"{p}.attention.self.value"))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0 / math.sqrt(d))
            a = a.transpose(1, 2).reshape(n, t, self.hidden)
            x = self._ln(self._lin(a, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
            h = F.gelu(self._lin(x, f"{p}.intermediate.dense"))
            x = self._ln(self._lin(h, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
        m = mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1).numpy()
