"""``ragcost plan`` through the real entry point: every input is range-checked (exit 2, one line)."""

from __future__ import annotations

import math
import os

import pytest

from ragcost.cli.main import main
from ragcost.cost.plan import index_ram_bytes

KV = ["--layers", "80", "--kv-heads", "8", "--head-dim", "128"]
SEQ = [*KV, "--gpu-mem-gb", "80", "--params-b", "8", "--context", "4096"]
INDEX = ["--chunks", "1000", "--dim", "384"]
TOKENS = ["--gpu-usd-per-hour", "3.6", "--tokens-per-second", "1000"]
PAYBACK = [*TOKENS, "--purchase-usd", "25000", "--power-kw", "0.7", "--usd-per-kwh", "0.15"]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def set_opt(args: list[str], option: str, value: str) -> list[str]:
    """``args`` with ``option``'s value replaced (or the option added)."""
    args = list(args)
    if option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    return args


def assert_refused(capsys, args: list[str], option: str, value: str, allowed: str) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"'{option}'" in lines[0] and value in lines[0] and allowed in lines[0], lines[0]


class TestModelShape:
    @pytest.mark.parametrize("option,value,allowed", [
        ("--layers", "-1", "[1, 10,000]"), ("--layers", "0", "[1, 10,000]"), ("--layers", "100000", "[1, 10,000]"),
        ("--kv-heads", "-8", "[1, 10,000]"), ("--head-dim", "0", "[1, 65,536]"),
    ])
    def test_out_of_range_is_exit_2_naming_option_value_and_range(self, capsys, option, value, allowed):
        assert_refused(capsys, set_opt(KV, option, value), option, value, allowed)

    def test_an_unknown_dtype_is_one_line(self, capsys):
        code, _, err = run(capsys, *KV, "--dtype", "float9")
        assert code == 1 and "dtype 'float9' is unknown" in err and len(err.strip().splitlines()) == 1


class TestSequences:
    @pytest.mark.parametrize("option,value,allowed", [
        ("--context", "0", "[1, 1,000,000,000]"), ("--context", "-4096", "[1,"),
        ("--gpu-mem-gb", "0", "(0, 1,000,000]"), ("--gpu-mem-gb", "-80", "(0,"), ("--gpu-mem-gb", "inf", "(0,"),
        ("--params-b", "-8", "(0, 1,000,000]"), ("--params-b", "nan", "(0,"),
        ("--weights-gb", "0", "(0, 10,000,000]"),
        ("--mem-utilization", "0", "(0, 1]"), ("--mem-utilization", "1.5", "(0, 1]"),
    ])
    def test_out_of_range_is_exit_2(self, capsys, option, value, allowed):
        assert_refused(capsys, set_opt(SEQ, option, value), option, value, allowed)

    def test_context_is_never_silently_dropped(self, capsys):
        code, out, _ = run(capsys, *SEQ)
        assert code == 0 and "KV cache per sequence" in out and "Sequences that fit" in out

    def test_gpu_memory_without_context_says_what_is_missing(self, capsys):
        code, _, err = run(capsys, *KV, "--gpu-mem-gb", "80", "--params-b", "8")
        assert code == 1 and "--context" in err

    def test_mem_utilization_sets_memory_only(self, capsys):
        # 80 GB x 0.5 = 40 GB - 16 GB = 24 GB / (327,680 B x 4,096) = 17.88 -> 17
        code, out, _ = run(capsys, *SEQ, "--mem-utilization", "0.5")
        assert code == 0 and "Sequences that fit: 17 " in out and "mem-utilization 0.5" in out


class TestIndex:
    @pytest.mark.parametrize("option,value,allowed", [
        ("--chunks", "-1000", "[1, 10,000,000,000,000]"), ("--chunks", "0", "[1,"),
        ("--dim", "-384", "[1, 1,000,000]"), ("--M", "-16", "[2, 1,024]"), ("--nbits", "0", "[1, 16]"),
    ])
    def test_out_of_range_is_exit_2(self, capsys, option, value, allowed):
        assert_refused(capsys, set_opt([*INDEX, "--kind", "hnsw"], option, value), option, value, allowed)

    def test_pq_m_must_divide_dim(self, capsys):
        assert_refused(capsys, [*INDEX, "--kind", "ivf_pq", "--pq-m", "50"], "--pq-m", "50", "divisor of 384")

    def test_unknown_kind_and_precision_are_exit_2(self, capsys):
        assert_refused(capsys, [*INDEX, "--kind", "lsh"], "--kind", "'lsh'", "flat, hnsw, ivf_flat, ivf_pq")
        assert_refused(capsys, [*INDEX, "--precision", "int3"], "--precision", "'int3'", "float32, float16")
        assert_refused(capsys, [*INDEX, "--backend", "annoy"], "--backend", "'annoy'", "faiss")
        assert_refused(capsys, [*INDEX, "--backend", "hnswlib", "--kind", "flat"], "--kind", "'flat'", "use one of hnsw")

    def test_the_precisions_offered_are_the_ones_sized(self):
        from ragcost.cost.plan import PRECISIONS
        from ragcost.index.sizes import PRECISION_BYTES

        assert PRECISIONS == tuple(PRECISION_BYTES)

    def test_another_backend_of_a_kind_is_planned_by_its_own_formula(self, capsys):
        code, out, err = run(capsys, *INDEX, "--backend", "faiss", "--kind", "hnsw")
        assert code == 0, err
        ram, own = index_ram_bytes(1000, 384, "float32", "hnsw", backend="faiss")
        assert own == int(1000 * (384 * 4 + 12 + 4 * (32 + 16 / 15)))  # faiss's HNSW arrays, not hnswlib's allocation
        assert ram == own and f"index {own:,} B" in out  # it holds the float32 vectors: no exact-scan copy

    def test_index_ram_is_the_storage_formula_and_prints_its_parts(self, capsys):
        code, out, _ = run(capsys, *INDEX, "--kind", "hnsw")
        ram, own = index_ram_bytes(1000, 384, "float32", "hnsw")
        assert code == 0 and f"Index RAM: {ram:,} B" in out
        assert f"index {own:,} B" in out
        # hnswlib holds the float32 vectors itself: no exact-scan copy is added (the storage formula's rule)
        assert ram == own and "exact-scan copy" not in out

    def test_chunks_without_dim_is_not_ignored(self, capsys):
        code, _, err = run(capsys, "--chunks", "1000")
        assert code == 1 and "index RAM needs --dim" in err


class TestDollars:
    @pytest.mark.parametrize("option,value,allowed", [
        ("--gpu-usd-per-hour", "-3.6", "[0, 1,000,000]"), ("--gpu-usd-per-hour", "inf", "[0,"),
        ("--tokens-per-second", "0", "(0, 1,000,000,000,000]"), ("--tokens-per-second", "-5", "(0,"),
        ("--purchase-usd", "-25000", "[0, 1,000,000,000,000]"), ("--power-kw", "-0.7", "[0, 1,000,000]"),
        ("--usd-per-kwh", "-0.15", "[0, 1,000]"), ("--busy", "0", "(0, 1]"), ("--busy", "2", "(0, 1]"),
    ])
    def test_out_of_range_is_exit_2(self, capsys, option, value, allowed):
        assert_refused(capsys, set_opt(PAYBACK, option, value), option, value, allowed)

    def test_a_free_gpu_costs_nothing_and_has_no_payback(self, capsys):
        code, out, _ = run(capsys, *set_opt(PAYBACK, "--gpu-usd-per-hour", "0"))
        assert code == 0
        assert "$ per 1M tokens (fully loaded): $0 " in out and "$ per 1M tokens (busy): $0 " in out
        assert "On-prem payback (fully loaded): n/a, the GPU is free" in out

    def test_busy_sets_the_time_share_only(self, capsys):
        # Fully loaded (issue 24: one idle rule, the GPU stays on): $3.6/h / (1,000 tokens/s x 3,600 x 0.5) x 1e6 = $2;
        # saving 730 x 3.6 - 730 x 0.5 x 0.105 = 2,589.675 $/month -> 9.654 months.
        # Busy only: $1 per 1M tokens; saving 730 x 0.5 x (3.6 - 0.105) = 1,275.675 $/month -> 19.6 months.
        code, out, _ = run(capsys, *PAYBACK, "--busy", "0.5")
        assert code == 0 and "$ per 1M tokens (fully loaded): $2 " in out and "On-prem payback (busy): 19.6 months" in out
        assert "$ per 1M tokens (busy): $1 " in out and "On-prem payback (fully loaded): 9.654 months" in out

    def test_huge_inputs_print_no_float_noise(self, capsys):
        code, out, _ = run(capsys, "--gpu-usd-per-hour", "999999.99", "--tokens-per-second", "0.003")
        assert code == 0
        result = out.split("$ per 1M tokens (fully loaded): ")[1].split()[0]
        assert result == "$92,592,591,667"

    def test_utilization_was_split_and_says_into_what(self, capsys):
        code, out, err = run(capsys, *TOKENS, "--utilization", "0.5")
        assert code == 2 and out == ""
        assert "'--utilization'" in err and "--mem-utilization" in err and "--busy" in err
        assert len(err.strip().splitlines()) == 1

    def test_a_gpu_price_alone_says_what_to_add(self, capsys):
        code, _, err = run(capsys, "--gpu-usd-per-hour", "0")
        assert code == 1 and "--tokens-per-second" in err and "nothing to plan" not in err

    def test_payback_without_power_says_what_to_add(self, capsys):
        code, _, err = run(capsys, *TOKENS, "--purchase-usd", "25000")
        assert code == 1 and "--power-kw, --usd-per-kwh" in err


class TestCorpus:
    """`--chunks N --dim D --kind hnsw|ivf_pq|pgvector-hnsw --shards S --replicas R` (README's table)."""

    CORPUS = ["--chunks", "100_000_000", "--dim", "384", "--shards", "32", "--replicas", "2"]

    @pytest.mark.parametrize("kind", ["hnsw", "ivf_pq", "pgvector-hnsw"])
    def test_prints_ram_disk_machines_dollars_and_build_time_per_kind(self, capsys, kind):
        from ragcost.cost.capacity import plan_corpus

        code, out, err = run(capsys, *self.CORPUS, "--kind", kind, "--pq-m", "48")
        assert code == 0, err
        p = plan_corpus(100_000_000, 384, kind, 32, 2, 64 * 2**30, 0.5292, pq_m=48, vcpus=8)
        assert "Vectors per shard: 3,125,000 " in out
        assert f"RAM per shard: {p.ram_bytes:,} B" in out and f"Disk per shard: {p.disk_bytes:,} B" in out
        assert f"Machines: {p.machines} x r7i-2xlarge" in out and "$ per month: $" in out
        assert "Embedding time: " in out and "18.1 chunks/s per 2-core worker" in out

    def test_measured_throughput_is_an_input(self, capsys):
        code, out, _ = run(capsys, *self.CORPUS, "--kind", "hnsw", "--embed-per-second", "36.2", "--workers", "10")
        # 100M / (36.2 x 10) s = 76.73 h
        assert code == 0 and "Embedding time: 76.73 h" in out

    def test_a_shard_too_big_for_the_instance_says_how_many_shards(self, capsys):
        code, _, err = run(capsys, "--chunks", "100_000_000", "--dim", "384", "--kind", "hnsw", "--shards", "1")
        assert code == 1 and "use --shards 4 or more" in err and len(err.strip().splitlines()) == 1

    def test_an_instance_without_ram_is_refused_naming_the_field(self, capsys):
        code, _, err = run(capsys, *self.CORPUS, "--kind", "hnsw", "--instance", "gpu-h100")
        assert code == 1 and "resources.gpu-h100 has no ram_gib" in err

    def test_corpus_mode_plans_any_kind_whose_backend_declares_its_size(self, capsys):
        code, out, err = run(capsys, *self.CORPUS, "--kind", "flat")
        assert code == 0, err
        assert "faiss flat" in out and "unchecked here" in out  # no benchmark checks flat's formula: said so
        code, out, err = run(capsys, *self.CORPUS, "--backend", "faiss", "--kind", "hnsw")
        assert code == 0 and "faiss hnsw M 16" in out, err

    def test_a_kind_that_declares_no_size_is_one_line_naming_it(self, capsys):
        code, _, err = run(capsys, *self.CORPUS, "--backend", "pgvector", "--kind", "ivf_flat")
        assert code == 1 and len(err.strip().splitlines()) == 1
        assert "'pgvector' kind 'ivf_flat' declares no size formula" in err


class TestCorpusInputsThatCannotBe:
    """Issue 39: inputs `plan` took at face value (more shards than vectors, an absurd fleet, a bare fleet count)."""

    def test_more_shards_than_vectors_is_exit_2_naming_both(self, capsys):
        code, out, err = run(capsys, "--chunks", "1", "--dim", "384", "--kind", "hnsw", "--shards", "48")
        assert code == 2 and err.count("\n") == 1 and out == ""
        assert "Invalid value for '--shards': 48 shards for 1 vector(s) (--chunks) would leave shards empty" in err
        assert "give --shards from 1 to 1" in err

    @pytest.mark.parametrize("entry, message", [
        ("gpu-h100: 2", r"fleet\.gpu-h100: a fleet entry is a mapping: write \{count: 2\} \(and an optional note: \.\.\.\)"),
        ("gpu-h100: {count: 1000000000000000}", r"fleet\.gpu-h100\.count: Input should be less than or equal to 100000 \(got 1000000000000000\)"),
    ])
    def test_a_fleet_entry_the_book_cannot_mean_is_one_line_with_file_line(self, capsys, tmp_path, entry, message):
        import re
        from pathlib import Path

        book = tmp_path / "book.yaml"
        book.write_text((Path(__file__).resolve().parents[2] / "pricing" / "default.yaml").read_text() + f"\nfleet:\n  {entry}\n")
        code, out, err = run(capsys, "--chunks", "1000", "--dim", "384", "--kind", "hnsw", "--shards", "1", "--pricing", str(book))
        assert code == 1 and err.count("\n") == 1 and out == ""
        assert re.search(rf"^error: {re.escape(str(book))}:\d+:\d+: {message}", err), err


class TestCheapestInstance:
    """Issue 42: corpus mode picked the book's 64 GiB machine ($772.6 a month for 1M chunks on 2 replicas) where the
    4 GiB one holds the 1.66 GiB shard ($130.3)."""

    ONE_M = ["--chunks", "1_000_000", "--dim", "384", "--kind", "hnsw", "--replicas", "2"]

    def test_the_cheapest_instance_that_holds_the_shards_is_picked_and_the_others_named(self, capsys):
        code, out, err = run(capsys, *self.ONE_M)
        assert code == 0, err
        # 2 machines x $0.08925/h x 730 h against 2 x $0.5292/h x 730 h (pricing/default.yaml)
        assert "Machines: 2 x cpu " in out and "$ per month: $130.3 " in out
        assert "the cheapest of the 2 instance(s)" in out and "also: r7i-2xlarge $772.6" in out
        assert "80% usable (the rest is headroom" in out

    def test_an_instance_too_small_for_a_shard_is_passed_over_and_named(self, capsys):
        code, out, err = run(capsys, "--chunks", "100_000_000", "--dim", "384", "--kind", "hnsw", "--shards", "32")
        assert code == 0, err
        assert "x r7i-2xlarge " in out and "too small: cpu" in out  # a 5.2 GiB shard in 3.2 usable GiB: no

    def test_an_instance_given_is_used_even_when_dearer(self, capsys):
        code, out, err = run(capsys, *self.ONE_M, "--instance", "r7i-2xlarge")
        assert code == 0, err
        assert "Machines: 2 x r7i-2xlarge " in out and "as given (--instance)" in out and "$ per month: $772.6 " in out


class TestPipeline:
    """`--pipeline P`: the indexed corpus's own chunks, dim, chunk-store bytes and embedding rate (issue 42 item 6)."""

    def test_counts_the_chunk_store_and_measures_the_rate_on_its_own_chunks(self, capsys, tmp_path):
        from ragcost.runtime.pipeline import Pipeline
        from tests.cli.conftest import write_corpus, write_pipeline

        write_corpus(tmp_path / "kb.jsonl")
        p = write_pipeline(tmp_path)
        assert main(["index", str(p), "--quiet"]) == 0
        capsys.readouterr()
        pipe = Pipeline.load(p, judge=False)
        try:
            n, store = pipe.store().count_chunks(), pipe.store_bytes()
        finally:
            pipe.close()
        code, out, err = run(capsys, "--pipeline", str(p), "--kind", "hnsw")
        assert code == 0, err
        assert f"Vectors per shard: {n:,} " in out and "dim 384" in out  # the store's chunks and the pipeline's dim
        per = store / n
        assert f"Chunk store: {math.ceil(n * per):,} B" in out and f"measured in {p}'s store ({n:,} chunks, {store:,} B)" in out
        assert f"the rate measured here ({os.cpu_count()} cores) on {n} of {p}'s own chunks" in out
        assert "18.1 chunks/s" not in out
        # the corpus grown: --chunks sizes it, the per-chunk bytes and the rate stay the measured ones
        code, out, err = run(capsys, "--pipeline", str(p), "--kind", "hnsw", "--chunks", "1_000_000", "--embed-per-second", "20")
        assert code == 0, err
        assert f"Chunk store: {math.ceil(1_000_000 * per):,} B" in out and "Vectors per shard: 1,000,000 " in out
        assert "Embedding time: 13.89 h" in out and "measured here" not in out  # 1M / (20 x 1 worker) s, as given

    def test_without_a_pipeline_the_chunk_store_is_the_stated_estimate(self, capsys):
        from ragcost.cost.capacity import CHUNK_ROW_BYTES

        code, out, err = run(capsys, *TestCorpus.CORPUS, "--kind", "hnsw")
        assert code == 0, err
        assert f"Chunk store: {100_000_000 * (CHUNK_ROW_BYTES + 4 * 384):,} B" in out and "--pipeline measures yours" in out

    def test_a_pipeline_not_indexed_yet_is_one_line_naming_the_fix(self, capsys, tmp_path):
        from tests.cli.conftest import write_corpus, write_pipeline

        write_corpus(tmp_path / "kb.jsonl")
        p = write_pipeline(tmp_path)
        code, out, err = run(capsys, "--pipeline", str(p), "--kind", "hnsw")
        assert code != 0 and out == ""
        assert len(err.strip().splitlines()) == 1 and "not indexed yet" in err and f"ragcost index {p}" in err
