"""A short encode runs on one torch thread (``embed.single_thread_chars``); a long one keeps every thread."""

from __future__ import annotations

import numpy as np
import pytest

from ragcost.config.pipeline import EmbedConfig
from ragcost.embed import make_embedder
from ragcost.embed.threads import is_short, one_thread_if_short
from tests.embed.tiny_model import build_tiny_model

torch = pytest.importorskip("torch")


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.delenv("RAGCOST_TORCH_THREADS", raising=False)  # the test workers' share (tests/conftest.py) off
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-bert"))


def test_is_short_counts_characters_of_all_texts():
    assert is_short(["abc", "de"], 6) and not is_short(["abc", "def"], 6)
    assert not is_short(["a"], 0)  # 0: never


def test_scoped_and_restored(two_threads):
    with one_thread_if_short(["a question?"], 512):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError):
        with one_thread_if_short(["a question?"], 512):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == 2  # restored when the encode raises too
    with one_thread_if_short(["x" * 600], 512):
        assert torch.get_num_threads() == 2


@pytest.mark.parametrize("texts,limit,inside", [(["how does with work?"], 512, 1), (["how does with work?"], 0, 2),
                                                (["a long chunk " * 60], 512, 2)])
def test_embedder_encodes_short_texts_on_one_thread(tiny, two_threads, texts, limit, inside):
    emb = make_embedder(EmbedConfig(model=tiny, device="cpu", single_thread_chars=limit))
    model = emb.model
    seen = []
    real = model.encode

    def spy(*a, **kw):
        seen.append(torch.get_num_threads())
        return real(*a, **kw)

    model.encode = spy
    emb.embed(texts)
    assert seen == [inside] and torch.get_num_threads() == 2


def test_one_thread_gives_the_same_vectors(tiny, two_threads):
    texts = ["what is a decorator?", "how are default arguments evaluated?"]
    one = make_embedder(EmbedConfig(model=tiny, device="cpu")).embed(texts)
    every = make_embedder(EmbedConfig(model=tiny, device="cpu", single_thread_chars=0)).embed(texts)
    np.testing.assert_allclose(one, every, atol=1e-5)
