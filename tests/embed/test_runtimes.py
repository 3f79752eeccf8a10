"""The ONNX Runtime and static (model2vec) embedders: the contract, their fingerprints, and their errors.

Exports and distillations go to a per-session cache folder (``RAGCOST_CACHE``), so each is built once.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from ragcost.config.pipeline import EmbedConfig
from ragcost.embed import make_embedder
from ragcost.errors import ConfigError, DependencyError
from ragcost.testing.embedder import TEXTS, EmbedderContract
from tests.embed.tiny_model import build_tiny_model


@pytest.fixture(scope="module", autouse=True)
def session_cache(tmp_path_factory):
    """Every export in this module goes to one tmp cache folder (set back afterwards)."""
    old = os.environ.get("RAGCOST_CACHE")
    os.environ["RAGCOST_CACHE"] = str(tmp_path_factory.mktemp("ragcost-cache"))
    yield
    if old is None:
        os.environ.pop("RAGCOST_CACHE", None)
    else:
        os.environ["RAGCOST_CACHE"] = old


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-bert"))


def _warm(**config):
    emb = make_embedder(EmbedConfig(device="cpu", batch_size=8, **config))
    emb.warm_up()
    return emb


@pytest.fixture(scope="module")
def onnx_minilm():
    pytest.importorskip("onnxruntime")
    return _warm(type="onnx")


class TestOnnxEmbedder(EmbedderContract):
    @pytest.fixture
    def embedder(self, onnx_minilm):
        return onnx_minilm

    def test_vectors_match_the_torch_runtime(self, onnx_minilm):
        torch_vectors = make_embedder(EmbedConfig(device="cpu")).embed(TEXTS)
        np.testing.assert_allclose(onnx_minilm.embed(TEXTS), torch_vectors, atol=1e-4)

    def test_a_second_embedder_reuses_the_export(self, onnx_minilm):
        folder = Path(os.environ["RAGCOST_CACHE"]) / "onnx" / onnx_minilm.fingerprint()[:16]
        before = (folder / "model.onnx").stat().st_mtime_ns
        _warm(type="onnx")
        assert (folder / "model.onnx").stat().st_mtime_ns == before


class TestOnnxInt8Embedder(EmbedderContract):
    batch_cosine = 0.99  # activations are scaled per batch tensor: the vector keeps its direction
    @pytest.fixture(scope="class")
    def int8(self):
        pytest.importorskip("onnxruntime")
        return _warm(type="onnx", onnx={"quantize": "int8"})

    @pytest.fixture
    def embedder(self, int8):
        return int8

    def test_vectors_stay_close_to_the_torch_runtime(self, int8):
        torch_vectors = make_embedder(EmbedConfig(device="cpu")).embed(TEXTS)
        assert float(np.min(np.sum(int8.embed(TEXTS) * torch_vectors, axis=1))) > 0.98


class TestBfloat16Embedder(EmbedderContract):
    """sentence-transformers computing in bfloat16: the torch runtime, another number format."""

    batch_cosine = 0.999  # the vector moves in its last digits, not in direction

    @pytest.fixture(scope="class")
    def bf16(self):
        return _warm(dtype="bfloat16")

    @pytest.fixture
    def embedder(self, bf16):
        return bf16

    def test_the_model_computes_in_bfloat16_and_the_vectors_stay_those_of_float32(self, bf16):
        import torch

        assert next(bf16.model.parameters()).dtype == torch.bfloat16
        torch_vectors = make_embedder(EmbedConfig(device="cpu")).embed(TEXTS)
        assert float(np.min(np.sum(bf16.embed(TEXTS) * torch_vectors, axis=1))) > 0.999

    def test_its_fingerprint_is_not_float32s_and_float32s_is_the_model_files_alone(self, bf16):
        from ragcost.embed.sentence_transformers import source_fingerprint

        f32 = make_embedder(EmbedConfig(device="cpu"))
        assert f32.fingerprint() == source_fingerprint(f32.path)  # stores made before dtype existed stay valid
        assert bf16.fingerprint() != f32.fingerprint()

    def test_is_named_by_its_dtype_in_an_eval_grid(self):
        from ragcost.evaluate.grid import embed_entry, embed_label

        assert embed_label(EmbedConfig(dtype="bfloat16")) == "sentence-transformers bf16"
        merged = embed_entry(EmbedConfig(dtype="bfloat16"), EmbedConfig(type="onnx"))  # an onnx entry over a bf16 pipeline
        assert merged.type == "onnx" and merged.dtype == "float32"

    def test_a_cpu_without_native_bfloat16_is_warned_about(self, monkeypatch):
        import ragcost.embed.sentence_transformers as st

        monkeypatch.setattr(st, "native_bf16", lambda: False)
        with pytest.warns(RuntimeWarning, match=r"embed.dtype bfloat16: this CPU has neither AMX nor AVX-512 BF16"):
            _warm(dtype="bfloat16")


class TestStaticEmbedder(EmbedderContract):
    @pytest.fixture(scope="class")
    def static(self, tiny):
        pytest.importorskip("model2vec")
        return _warm(type="static", model=tiny, static={"pca_dims": 16})

    @pytest.fixture
    def embedder(self, static):
        return static

    def test_dimension_is_the_distilled_one_and_tokens_are_the_source_models(self, static, tiny):
        assert static.native_dim == 16
        torch_emb = make_embedder(EmbedConfig(model=tiny, device="cpu"))
        assert static.count_tokens(TEXTS) == torch_emb.count_tokens(TEXTS)


class TestFingerprint:
    def test_each_runtime_and_option_has_its_own_fingerprint(self, tiny):
        configs = [{}, {"dtype": "bfloat16"}, {"type": "onnx"}, {"type": "onnx", "onnx": {"quantize": "int8"}},
                   {"type": "static"}, {"type": "static", "static": {"pca_dims": 64}}]
        fps = [make_embedder(EmbedConfig(model=tiny, **c)).fingerprint() for c in configs]
        assert len(set(fps)) == len(fps)

    def test_the_fingerprint_follows_the_model_bytes_not_its_name(self, tiny, tmp_path):
        copy = shutil.copytree(tiny, tmp_path / "renamed")
        assert make_embedder(EmbedConfig(type="onnx", model=str(copy))).fingerprint() == \
            make_embedder(EmbedConfig(type="onnx", model=tiny)).fingerprint()


class TestErrors:
    @pytest.mark.parametrize("kind, module, extra", [("onnx", "onnxruntime", "onnx"), ("static", "model2vec", "static")])
    def test_a_missing_package_is_one_line_naming_the_extra(self, monkeypatch, tiny, kind, module, extra):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
        emb = make_embedder(EmbedConfig(type=kind, model=tiny))
        with pytest.raises(DependencyError, match=rf"^embed.type {kind} needs {module}: pip install 'ragcost\[{extra}\]'$"):
            emb.warm_up()

    @pytest.mark.parametrize("kind", ["onnx", "static"])
    def test_a_model_folder_without_weights_names_the_folder_and_leaves_no_build(self, tiny, tmp_path, kind):
        broken = shutil.copytree(tiny, tmp_path / "no-weights")
        for f in broken.glob("model.safetensors"):
            f.unlink()
        emb = make_embedder(EmbedConfig(type=kind, model=str(broken)))
        with pytest.raises(ConfigError, match=rf"embed.type {kind}: .* the model folder {broken} failed: .*\S") as err:
            emb.warm_up()
        assert "\n" not in str(err.value)
        cache = Path(os.environ["RAGCOST_CACHE"]) / kind
        assert not (cache / emb.fingerprint()[:16]).exists()
        assert not [p for p in cache.iterdir() if p.name.startswith(".")]

    def test_options_of_another_type_are_refused(self):
        with pytest.raises(ValueError, match=r"onnx options are set but type is 'sentence-transformers'; set type: onnx"):
            EmbedConfig(onnx={"quantize": "int8"})
        with pytest.raises(ValueError, match=r"dtype bfloat16 is for type sentence-transformers, not 'onnx'; remove dtype"):
            EmbedConfig(type="onnx", dtype="bfloat16")

    def test_cuda_is_refused_for_cpu_runtimes(self, tiny):
        with pytest.raises(ConfigError, match=r"embed.device 'cuda': embed.type onnx runs on the CPU"):
            make_embedder(EmbedConfig(type="onnx", model=tiny, device="cuda"))
