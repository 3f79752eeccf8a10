"""Loading local Hugging Face / sentence-transformers models: offline, quiet, on the right device."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from ragcost.errors import DependencyError


def local_dir(model: str, base: Optional[Path] = None) -> Optional[Path]:
    """``model`` as a folder beside the pipeline file (``base``) or from the working directory."""
    for cand in ([base / model] if base else []) + [Path(model)]:
        if cand.is_dir():
            return cand.resolve()
    return None


def sentence_transformers_class(name: str, needed_by: str) -> Any:
    """``sentence_transformers.<name>``, imported with the hub offline and its progress bars off."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        import sentence_transformers
    except ImportError:
        raise DependencyError(f"{needed_by} needs sentence-transformers: pip install sentence-transformers") from None
    return getattr(sentence_transformers, name)


def torch_device(device: str) -> str:
    """``auto`` is cuda when torch sees a GPU, else cpu."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
