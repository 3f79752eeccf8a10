"""`ragcost index` says what each long phase will do before it starts and shows its progress with a rate and the
time left (issue 42: a corpus's sentence vectors took many minutes with no output, and the user killed it)."""

from __future__ import annotations

import io
import re

from ragcost.cli.index_progress import LineProgress, duration
from tests.cli.conftest import run_cli, write_corpus, write_pipeline

GROUNDED = [{"type": "retrieve", "k": 3}, {"type": "generate", "backend": "extractive"},
            {"type": "guard", "on": "answer", "checks": [{"check": "grounded"}]}]  # sentence_vectors: index, the default


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_lines_give_the_rate_and_the_time_left_at_most_once_a_second():
    out, clock = io.StringIO(), Clock()
    p = LineProgress(stream=out, clock=clock)
    p.plan("to embed: 1000 chunks")
    clock.t += 10
    p.step("chunks", 100, 1000)  # 100 in the 10 s since the plan line: 10/s, 900 left
    clock.t += 0.5
    p.step("chunks", 150, 1000)  # within the second: not printed
    clock.t += 0.5
    p.step("chunks", 200, 1000)
    clock.t += 80
    p.step("chunks", 1000, 1000)  # the last is always printed
    clock.t += 1
    p.step("sentences", 0, 50)  # a phase that says its size first: timed from here, nothing printed
    clock.t += 5
    p.step("sentences", 50, 50)
    assert out.getvalue().splitlines() == [
        "to embed: 1000 chunks",
        "embedded 100/1000 chunks, 10.0 chunks/s, about 1m30s left",
        "embedded 200/1000 chunks, 18.2 chunks/s, about 44s left",
        "embedded 1000/1000 chunks, 11.0 chunks/s in 1m31s",
        "embedded 50/50 sentences, 10.0 sentences/s in 5s",
    ]


def test_chunking_is_a_phase_of_its_own_without_the_workers():
    out, clock = io.StringIO(), Clock()
    p = LineProgress(stream=out, clock=clock)
    p.worker("10.0.0.5:4312", 64)
    p.step("chunked documents", 0, 5000)
    clock.t += 4
    p.step("chunked documents", 1000, 5000)
    clock.t += 16
    p.step("chunked documents", 5000, 5000)
    p.step("chunked documents", 0, 79)  # a quick phase: nothing, neither its steps nor its end
    clock.t += 0.1
    p.step("chunked documents", 32, 79)
    clock.t += 0.1
    p.step("chunked documents", 79, 79)
    assert out.getvalue().splitlines() == ["chunked 1000/5000 documents, 250.0 documents/s, about 16s left",
                                           "chunked 5000/5000 documents, 250.0 documents/s in 20s"]


def test_reading_counts_documents_with_a_rate_until_the_reader_ends():
    out, clock = io.StringIO(), Clock()
    p = LineProgress(stream=out, clock=clock)
    p.step("read documents", 0, 0)  # a reader streams: no total until it ends
    clock.t += 2
    p.step("read documents", 60, 0)
    clock.t += 0.5
    p.step("read documents", 70, 0)  # within the second: not printed
    clock.t += 2.5
    p.step("read documents", 150, 0)
    p.step("read documents", 150, 150)  # its end, always printed
    p.step("read documents", 0, 0)  # a quick read: nothing, neither its steps nor its end
    clock.t += 0.2
    p.step("read documents", 12, 0)
    p.step("read documents", 12, 12)
    assert out.getvalue().splitlines() == ["read 60 documents, 30.0 documents/s", "read 150 documents, 30.0 documents/s",
                                           "read 150/150 documents, 30.0 documents/s in 5s"]


def test_a_slow_reader_is_shown_before_the_plan_line(tmp_path, capsys, monkeypatch):
    import ragcost.cli.index_progress as ip

    write_corpus(tmp_path / "kb.jsonl")
    pipe = write_pipeline(tmp_path)
    ticks = iter(range(0, 100_000, 2))  # each reading of the progress clock two seconds after the last
    monkeypatch.setattr(ip, "LineProgress", lambda workers: LineProgress(workers, clock=lambda: float(next(ticks))))
    code, _, err = run_cli(capsys, "index", pipe)
    assert code == 0, err
    lines = err.splitlines()
    read = [i for i, x in enumerate(lines) if x.startswith("read ")]
    plan = next(i for i, x in enumerate(lines) if x.startswith("to embed"))
    assert read and read[-1] < plan, lines
    assert re.fullmatch(r"read (\d+)/\1 documents, [\d.]+ documents/s in \d+m?\d*s", lines[read[-1]]), lines[read[-1]]


def test_ray_workers_stay_at_the_end_of_the_line():
    out, clock = io.StringIO(), Clock()
    p = LineProgress(stream=out, clock=clock)
    p.plan("to embed: 1200 chunks")
    p.worker("10.0.0.5:4312", 64)
    p.worker("10.0.0.6:977", 32)
    clock.t += 2
    p.step("chunks", 96, 1200)
    assert out.getvalue().endswith("left (workers: 10.0.0.5:4312 64, 10.0.0.6:977 32)\n")


def test_durations():
    assert [duration(s) for s in (4.4, 59.6, 185, 3720)] == ["4s", "1m00s", "3m05s", "1h02m"]


def test_index_says_each_phase_before_it_runs_and_quiet_says_none(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    kb = write_pipeline(tmp_path, stages=GROUNDED)
    code, out, err = run_cli(capsys, "index", kb)
    assert code == 0, err
    lines = err.splitlines()
    plan = next(i for i, x in enumerate(lines) if x.startswith("to embed: "))
    assert re.match(r"to embed: \d+ chunks of 12 documents \(0 unchanged\) with all-MiniLM-L6-v2; then every sentence "
                    r".*sentence_vectors: query", lines[plan])
    chunks = [i for i, x in enumerate(lines) if re.match(r"embedded \d+/\d+ chunks, [\d.]+ chunks/s", x)]
    build = next(i for i, x in enumerate(lines) if x.startswith("building the index: hnswlib/hnsw over "))
    sentences = [i for i, x in enumerate(lines) if re.match(r"embedded (\d+)/\1 sentences, [\d.]+ sentences/s in \d+s", x)]
    assert plan < chunks[0] <= chunks[-1] < build < sentences[0]  # each phase said before it runs, in order
    assert not any(x.startswith("chunked ") for x in lines)  # chunking 12 documents takes no second: no line
    assert "sentence vectors for the grounded check" in out

    (tmp_path / "kb.jsonl").write_text((tmp_path / "kb.jsonl").read_text().replace("30 days", "45 days"))
    code, out, err = run_cli(capsys, "index", kb, "--quiet")
    assert code == 0, err
    assert err == "" and "1 embedded" in out  # one changed document: no progress, the summary only

    code, out, err = run_cli(capsys, "index", kb)
    assert code == 0, err
    assert "to embed" not in err and "embedded" not in err  # nothing to do: nothing said before it


def test_index_builds_the_keyword_index_so_the_first_query_loads_it(tmp_path, capsys, monkeypatch):
    """A hybrid re-rank's BM25 index is built by `ragcost index`, beside the vector index; a first query used to
    build it (a 4,594-chunk corpus: ~12 s of a user's first CLI query)."""
    import bm25s

    write_corpus(tmp_path / "kb.jsonl")
    kb = write_pipeline(tmp_path, stages=[{"type": "retrieve", "k": 5}, {"type": "rerank", "backend": "hybrid", "top_n": 3}],
                        useful={"threshold": 0.02})
    code, out, err = run_cli(capsys, "index", kb)
    assert code == 0, err
    assert re.search(r"^rerank:hybrid: keyword index \(BM25, \w+ tokenizer\) for 12 chunks, [\d.]+s -> ", out, re.M)
    assert "preparing rerank:hybrid" in err
    assert list((tmp_path / "index").glob("bm25-*"))

    def no_build(*a, **k):
        raise AssertionError("the first query built the BM25 index")

    monkeypatch.setattr(bm25s.BM25, "index", no_build)
    code, out, err = run_cli(capsys, "query", kb, "refund", "--json", "--no-ledger")
    assert code == 0, err


def _summary_counts(out: str) -> tuple[int, int]:
    chunks = int(re.search(r"\((\d+) chunks, ", out).group(1))
    m = re.search(r"sentence vectors for the grounded check: \d+ \((\d+) embedded", out)
    return chunks, int(m.group(1)) if m else 0


def test_dry_run_counts_what_index_then_embeds_and_writes_nothing(tmp_path, capsys):
    """#42 item 2: the counts, a measured time and the dollars before anything is embedded; nothing written (no
    store created, a stored corpus left as it was)."""
    write_corpus(tmp_path / "kb.jsonl")
    kb = write_pipeline(tmp_path, stages=GROUNDED)
    code, out, err = run_cli(capsys, "index", kb, "--dry-run")
    assert code == 0, err
    assert not (tmp_path / "kb.duckdb").exists() and not (tmp_path / "index").exists()
    m = re.search(r"^chunks: (\d+) to embed \(\d+ tokens\): about \d+\w*s?, \$[\d.]+ \(measured: (\d+) of them in ", out, re.M)
    s = re.search(r"^sentences for the grounded check: (\d+) at most: about ", out, re.M)
    assert m and s, out
    assert "documents: 12 read, 0 unchanged, 12 to embed" in out and re.search(r"^total: about .*, \$[\d.]+, then", out, re.M)

    code, real, err = run_cli(capsys, "index", kb, "--quiet")
    assert code == 0, err
    assert _summary_counts(real) == (int(m.group(1)), int(s.group(1)))  # the dry run's counts are what index embedded

    (tmp_path / "kb.jsonl").write_text((tmp_path / "kb.jsonl").read_text().replace("30 days", "45 days"))
    before = (tmp_path / "kb.duckdb").read_bytes()
    code, out, err = run_cli(capsys, "index", kb, "--dry-run")
    assert code == 0, err
    assert "documents: 12 read, 11 unchanged, 1 to embed" in out and "chunks: 1 to embed" in out
    assert (tmp_path / "kb.duckdb").read_bytes() == before  # read only: not a byte of the store changed
    code, real, err = run_cli(capsys, "index", kb, "--quiet")
    assert code == 0 and _summary_counts(real)[0] == 1


def test_dry_run_of_a_redacting_pipeline_creates_no_store_for_its_key(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    kb = write_pipeline(tmp_path, redact=["pii"])
    code, out, err = run_cli(capsys, "index", kb, "--dry-run")
    assert code == 0, err
    assert "12 to embed" in out and not (tmp_path / "kb.duckdb").exists()


def test_dry_run_does_not_prune(tmp_path, capsys):
    write_corpus(tmp_path / "kb.jsonl")
    code, out, err = run_cli(capsys, "index", write_pipeline(tmp_path), "--dry-run", "--prune")
    assert code == 2 and "--dry-run estimates the embedding; it does not prune" in err


def test_evals_lines_give_the_rate_and_the_time_left_of_each_phase():
    from ragcost.cli.index_progress import PhaseLines

    out, clock = io.StringIO(), Clock()
    p = PhaseLines(stream=out, clock=clock)
    p("embedding corpus", 0, 1000)
    clock.t += 10
    p("embedding corpus", 250, 1000)  # 25/s: 30 s left
    clock.t += 1
    p("embedding corpus", 275, 1000)  # within two seconds of the last line: not printed
    clock.t += 29
    p("embedding corpus", 1000, 1000)  # the end is always printed
    p("configurations", 0, 12)
    p("searching flat d384 f32", 0, 12)
    clock.t += 12
    p("configurations", 3, 12)  # 4 s each: 36 s left (the searching line at 0 came within two seconds: not printed)
    clock.t += 4
    p("searching hnsw-m16 d384 f32 ef=64", 4, 12)
    clock.t += 32
    p("configurations", 12, 12)
    assert out.getvalue().splitlines() == [
        "embedding corpus: 0/1000",
        "embedding corpus: 250/1000, 25.0/s, about 30s left",
        "embedding corpus: 1000/1000, 25.0/s in 40s",
        "configurations: 0/12",
        "configurations: 3/12, 4.0 s each, about 36s left",
        "searching hnsw-m16 d384 f32 ef=64: 4/12, 4.0 s each, about 32s left",
        "configurations: 12/12, 4.0 s each in 48s",
    ]
