"""Chunking and embedders in the eval grid: one corpus embedding per (embedder, chunking), cached."""

from __future__ import annotations

import pytest

from ragcost.errors import ConfigError
from ragcost.evaluate.run import run_eval
from ragcost.evaluate.spec import load_spec
from ragcost.evaluate.textcache import TextVectorCache
from tests.evaluate.conftest import REPO, write_beir, write_spec

FLAT = f"grid:\n  - index: {REPO}/indexes/flat.yaml"


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grid")
    write_beir(folder / "data" / "synth")
    spec = write_spec(folder, FLAT, dims=[64], precisions=["float32"],
                      chunking=[{"size": 9, "overlap": 0, "tail": "none"}, {"size": 9, "overlap": 0, "tail": "align", "min_tail": 8},
                                {"size": 16, "overlap": 4, "tail": "none"}],
                      embedders=[{"type": "test-hashing", "batch_size": 8}])
    return folder, spec, run_eval(load_spec(spec), folder / "cache")


class TestChunkingGrid:
    def test_every_chunking_is_measured_and_named(self, grid_run):
        names = sorted(r.name for r in grid_run[2].ok())
        assert names == ["c16o4 | flat d64 f32", "c9o0 align8 | flat d64 f32", "c9o0 | flat d64 f32"]

    def test_each_result_carries_the_embed_and_chunking_it_ran_on(self, grid_run):
        by = {r.name: r for r in grid_run[2].ok()}
        r = by["c9o0 align8 | flat d64 f32"]
        assert r.chunking == {"size": 9, "overlap": 0, "tail": "align", "min_tail": 8}
        assert r.embed["type"] == "test-hashing" and r.embed["batch_size"] == 8

    def test_smaller_chunks_make_more_of_them_and_different_quality(self, grid_run):
        by = {r.name: r for r in grid_run[2].ok()}
        assert by["c9o0 | flat d64 f32"].metrics["ndcg@10"] != by["c16o4 | flat d64 f32"].metrics["ndcg@10"]

    def test_each_chunking_has_its_own_cached_store_and_a_rerun_embeds_nothing(self, grid_run):
        folder, spec, _ = grid_run
        stores = sorted(p.name for p in (folder / "cache").glob("*.duckdb"))
        assert len(stores) == 3 and any("-align8" in s for s in stores)
        again = run_eval(load_spec(spec), folder / "cache")
        assert again.embedded_documents == 0

    def test_chunks_two_chunkings_share_are_embedded_once(self, grid_run):
        from ragcost.store import open_store

        folder = grid_run[0]
        (cache,) = (folder / "cache").glob("*.texts.npz")
        texts = {}
        for store in (folder / "cache").glob("*.duckdb"):
            st = open_store(f"duckdb:///{store}", "synthetic", {})
            texts[store.stem] = set(st.chunk_column("text")[1])
            st.close()
        (c9,) = [t for k, t in texts.items() if k.endswith("c9o0-tevery_chunk")]
        (align,) = [t for k, t in texts.items() if k.endswith("align8-tevery_chunk")]
        assert c9 & align and align - c9  # align changed some tails and kept the other chunks
        assert len(TextVectorCache(cache).vectors) == len(set().union(*texts.values()))


class TestBadGrid:
    def test_overlap_not_smaller_than_size_is_refused_with_file_and_line(self, tmp_path):
        write_beir(tmp_path / "data" / "synth")
        spec = write_spec(tmp_path, FLAT, chunking=[{"size": 16, "overlap": 4}, {"size": 16, "overlap": 16}])
        with pytest.raises(ConfigError, match=r"spec\.yaml:\d+:\d+.*chunking\.1.*overlap \(16\) must be smaller than size \(16\)"):
            load_spec(spec)

    def test_an_unknown_tail_rule_is_refused_naming_the_choices(self, tmp_path):
        write_beir(tmp_path / "data" / "synth")
        spec = write_spec(tmp_path, FLAT, chunking=[{"size": 16, "overlap": 4, "tail": "drop"}])
        with pytest.raises(ConfigError, match=r"spec\.yaml:\d+.*chunking\.0\.tail.*'none', 'merge' or 'align'"):
            load_spec(spec)

    def test_an_embedder_entry_takes_the_pipeline_embed_shape(self, tmp_path):
        write_beir(tmp_path / "data" / "synth")
        spec = write_spec(tmp_path, FLAT, embedders=[{"type": "test-hashing", "colour": "red"}])
        with pytest.raises(ConfigError, match=r"spec\.yaml:\d+.*embedders\.0\.colour"):
            load_spec(spec)


class TestEmbedEntries:
    """An `embedders:` entry over the pipeline's embed (regression: nested options stayed raw dicts,
    so `{type: onnx, onnx: {quantize: int8}}` failed with "'dict' object has no attribute 'quantize'")."""

    def test_nested_runtime_options_become_their_model(self):
        from ragcost.config.pipeline import EmbedConfig, OnnxOptions
        from ragcost.evaluate.grid import embed_entry

        base = EmbedConfig(batch_size=32)
        e = embed_entry(base, EmbedConfig.model_validate({"type": "onnx", "onnx": {"quantize": "int8"}}))
        assert isinstance(e.onnx, OnnxOptions) and e.onnx.quantize == "int8"
        assert e.type == "onnx" and e.batch_size == 32  # unset keys are the pipeline's

    def test_runtime_options_carry_over_only_to_an_entry_of_the_same_type(self):
        from ragcost.config.pipeline import EmbedConfig
        from ragcost.evaluate.grid import embed_entry

        base = EmbedConfig.model_validate({"type": "onnx", "onnx": {"quantize": "int8"}})
        assert embed_entry(base, EmbedConfig.model_validate({"type": "sentence-transformers"})).onnx is None
        assert embed_entry(base, EmbedConfig.model_validate({"batch_size": 8})).onnx.quantize == "int8"

    def test_entries_of_one_runtime_are_named_by_what_changes_their_vectors(self):
        from ragcost.config.pipeline import EmbedConfig
        from ragcost.evaluate.grid import embed_label

        onnx = EmbedConfig.model_validate({"type": "onnx"})
        int8 = EmbedConfig.model_validate({"type": "onnx", "onnx": {"quantize": "int8"}})
        static = EmbedConfig.model_validate({"type": "static", "static": {"pca_dims": 128}})
        assert [embed_label(e) for e in (onnx, int8, static)] == ["onnx", "onnx int8", "static pca128"]
