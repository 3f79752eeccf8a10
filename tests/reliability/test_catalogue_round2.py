"""The bad-input catalogue, second round (issue 28): the Python API, eval and tune writes, filters,
read-only reports, the store lock, full and read-only disks, validate and plan.

Same table format and runner as ``test_cli_catalogue.py`` (see its docstring), plus the data-intact
check every row here gets: each file in the probe's folder after ``setup`` has the same bytes and mode
after the run, and no file appears, except where a row says what may (``may_write``). The files the
first catalogue's ``check`` callbacks look at one by one (the store, the index, the pipeline) are all in
that folder. Rows that need the Python API, a second process or a small disk have tables of their own
below, checked the same way.

Disk-full and read-only disks are real where this process may mount a small tmpfs (root with
CAP_SYS_ADMIN, as in CI); elsewhere those rows skip, and the ENOSPC row that patches the write runs
everywhere.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional

import pytest

from ragcost.cli.main import main
from tests.reliability.conftest import REPO, Workspace
from tests.reliability.test_cli_catalogue import Probe, test_probe as _run_probe

Q = ("query", "{kb}")
VERIFIED = ".ragcost-verified.json"  # a cache of checksums already verified, not data: may be rewritten


# --- the data-intact check ---------------------------------------------------------------------

def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file below ``folder`` (not following links out of it): relative path -> (sha256, mode)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(folder))] = ("-> " + os.readlink(p), 0)
        elif p.is_file() and p.name != VERIFIED:
            out[str(p.relative_to(folder))] = (hashlib.sha256(p.read_bytes()).hexdigest(), stat.S_IMODE(p.stat().st_mode))
    return out


def assert_intact(before: dict, after: dict, may_write: str = r"^$") -> None:
    changed = [k for k in before if after.get(k) != before[k] and not re.search(may_write, k)]
    new = [k for k in after if k not in before and not re.search(may_write, k)]
    assert not changed, f"changed or lost: {changed}"
    assert not new, f"written: {new}"


@dataclass(frozen=True)
class Row:
    """A CLI probe and what it may write (a regex over paths relative to the probe's folder)."""

    probe: Probe
    may_write: str = r"^$"


# Progress lines a long command prints on stderr while it works (not a terminal): not part of the error.
PROGRESS = re.compile(r"^(embedded \d+/\d+ (chunks|sentences).*|to embed: .*|building the index: .*|preparing .*|(loading model|embedding corpus|embedding queries|configurations): \d+/(\d+|\?))\n", re.M)


class _WithoutProgress:
    """capsys, with stderr's progress lines left out: the first catalogue's runner then checks the one error line."""

    def __init__(self, capsys) -> None:
        self.capsys = capsys

    def readouterr(self):
        c = self.capsys.readouterr()
        return SimpleNamespace(out=c.out, err=PROGRESS.sub("", c.err))


def run_row(row: Row, ws: Workspace, capsys) -> None:
    if row.probe.setup:
        row.probe.setup(ws)
    capsys.readouterr()
    before = snapshot(ws.dir)
    _run_probe(replace(row.probe, setup=None), ws, _WithoutProgress(capsys))
    assert_intact(before, snapshot(ws.dir), row.may_write)


# --- setups ------------------------------------------------------------------------------------

def _indexed(ws: Workspace) -> None:
    ws.indexed("clean")


def _synthetic_eval(ws: Workspace, dims: Any = None, grid_dims: Any = None, queries_extra: str = "", mode: Optional[int] = None) -> None:
    """A small BEIR folder, a pipeline on the hashing embedder (pipe.yaml) and an eval spec (spec.yaml)."""
    from tests.evaluate.conftest import write_beir, write_spec

    write_beir(ws.dir / "data" / "synth", n_docs=24)
    if queries_extra:
        with (ws.dir / "data" / "synth" / "queries.jsonl").open("a") as f:
            f.write(queries_extra)
    entry = f"  - index: {REPO}/indexes/flat.yaml" + (f"\n    dims: {json.dumps(grid_dims)}" if grid_dims is not None else "")
    extra = {"dims": dims} if dims is not None else {"dims": [64, 32]}
    write_spec(ws.dir, "grid:\n" + entry, precisions=["float32"], k=[5], **extra)
    if mode is not None:
        os.chmod(ws.dir / "pipe.yaml", mode)


def _eval_with(**kw: Any) -> Callable[[Workspace], None]:
    return lambda ws: _synthetic_eval(ws, **kw)


EVAL = ("eval", "{dir}/spec.yaml", "--no-ledger", "--cache-dir", "{dir}/cache")
TUNE = ("tune", "{dir}/spec.yaml", "--cache-dir", "{dir}/cache")
DUP = json.dumps({"_id": "q0", "text": "a second text under the same id"}) + "\n"
MAXQ = r"Invalid value for '--max-queries': {v} is out of range: give the number of judged queries to evaluate, from 1"


def _model_config(**overrides: Any) -> Callable[[Workspace], None]:
    cfg = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,
           "torch_dtype": "bfloat16", **overrides}
    return lambda ws: ws.write("config.json", json.dumps(cfg))


PLAN = ("plan", "--model-config", "{dir}/config.json", "--gpu-mem-gb", "80", "--weights-gb", "16", "--context", "8192")


def _without_index(ws: Workspace) -> None:
    ws.indexed("clean")
    shutil.rmtree(ws.dir / "index")


def _index_params_changed(ws: Workspace) -> None:
    ws.indexed("clean")
    ws.pipeline(index={"backend": "hnswlib", "kind": "hnsw", "build": {"M": 16, "ef_construction": 64}, "search": {"ef": 32}})


def _corpus_changed_in_the_store(ws: Workspace) -> None:
    """The store holds one document fewer than the index was built from (a prune whose rebuild failed)."""
    import duckdb

    ws.indexed("clean")
    con = duckdb.connect(str(ws.dir / "kb.duckdb"))
    tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
    docs = next(t for t in tables if t.endswith("_documents"))
    con.execute(f"DELETE FROM {docs} WHERE id = 'kb-5'")
    con.close()


ROWS: list[Row] = [
    # --- filters: '' and blank are refused like null and [] ---------------------------------------
    Row(Probe("filter_empty_string_is_refused", (*Q, "refund", "--filter", ""), 1,
              r"filter '' is empty; give a JSON object, e\.g\. .*, or leave the filter out to search every document", setup=_indexed)),
    Row(Probe("filter_blank_string_is_refused", (*Q, "refund", "--filter", "  "), 1, r"filter ' +' is empty", setup=_indexed)),
    Row(Probe("filter_null_is_still_refused", (*Q, "refund", "--filter", "null"), 1, r"filter must be a JSON object", setup=_indexed)),
    # --- eval and tune specs -----------------------------------------------------------------------
    Row(Probe("eval_duplicate_query_id_is_refused_naming_id_and_file", EVAL, 1,
              r"data/synth/queries\.jsonl:10: query id 'q0' is used again \(first at line 1\); give every query its own id",
              setup=_eval_with(queries_extra=DUP))),
    Row(Probe("tune_duplicate_query_id_is_refused", TUNE, 1, r"queries\.jsonl:10: query id 'q0' is used again",
              setup=_eval_with(queries_extra=DUP))),
    Row(Probe("eval_dims_zero_is_refused", EVAL, 1, r"spec\.yaml:\d+:\d+: dims.*dim 0 is too small: each dim must be >= 8",
              setup=_eval_with(dims=[0]))),
    Row(Probe("eval_dims_minus_one_is_refused", EVAL, 1, r"spec\.yaml:\d+:\d+: dims.*dim -1 is too small", setup=_eval_with(dims=[-1]))),
    Row(Probe("eval_grid_dims_minus_one_is_refused", EVAL, 1, r"spec\.yaml:\d+:\d+: grid\.0\.dims.*dim -1 is too small",
              setup=_eval_with(grid_dims=[-1]))),
    Row(Probe("tune_write_dims_minus_one_is_refused_before_writing", (*TUNE, "--write"), 1, r"spec\.yaml:\d+:\d+: dims.*dim -1 is too small",
              setup=_eval_with(dims=[64, -1]))),
    *[Row(Probe(f"{cmd}_max_queries_{name}_is_a_usage_error", (*argv, "--max-queries", v), 2, MAXQ.format(v=re.escape(v)),
                setup=_eval_with()))
      for cmd, argv in (("eval", EVAL), ("tune", TUNE)) for name, v in (("zero", "0"), ("minus_one", "-1"), ("minus_five", "-5"))],
    Row(Probe("eval_write_to_a_read_only_pipeline_is_refused_before_the_run", (*EVAL, "--write"), 1,
              r"--write: .*pipe\.yaml is read-only \(mode 0444\); make it writable \(chmod u\+w .*\) or leave out --write; nothing written",
              setup=_eval_with(mode=0o444))),
    Row(Probe("tune_write_to_a_read_only_pipeline_is_refused_before_the_run", (*TUNE, "--write"), 1,
              r"--write: .*pipe\.yaml is read-only \(mode 0444\)", setup=_eval_with(mode=0o444))),
    # --- validate says what query would say ------------------------------------------------------
    Row(Probe("validate_without_an_index_but_a_store", ("validate", "{kb}"), 1, r"no index at .*index; run `ragcost index .*kb\.yaml` to rebuild",
              setup=_without_index)),
    Row(Probe("validate_index_built_with_other_parameters", ("validate", "{kb}"), 1, r"M.*ragcost index", setup=_index_params_changed)),
    Row(Probe("validate_index_of_another_corpus_revision", ("validate", "{kb}"), 1, r"corpus_revision.*ragcost index",
              setup=_corpus_changed_in_the_store)),
    Row(Probe("validate_up_to_date_index_says_so", ("validate", "{kb}"), 0, "", out=r"kb\.yaml: ok — .*index built with 5 vectors, up to date",
              setup=_indexed)),
    Row(Probe("validate_nothing_built_yet_says_so", ("validate", "{kb}"), 0, "",
              out=r"kb\.yaml: ok — .*not indexed yet: run `ragcost index .*kb\.yaml` before `ragcost query`")),
    # --- plan -----------------------------------------------------------------------------------
    Row(Probe("plan_num_key_value_heads_zero_is_refused", PLAN, 1,
              r"config\.json: num_key_value_heads is 0; it must be a whole number >= 1: fix the config, or give --kv-heads",
              setup=_model_config(num_key_value_heads=0))),
    Row(Probe("plan_num_key_value_heads_negative_is_refused", PLAN, 1, r"num_key_value_heads is -8", setup=_model_config(num_key_value_heads=-8))),
    Row(Probe("plan_num_hidden_layers_zero_is_refused", PLAN, 1, r"num_hidden_layers is 0", setup=_model_config(num_hidden_layers=0))),
    Row(Probe("plan_kv_heads_zero_with_kv_heads_given_runs", (*PLAN, "--kv-heads", "8"), 0, "", out=r"kv_heads 8",
              setup=_model_config(num_key_value_heads=0))),
    Row(Probe("plan_kv_heads_null_means_one_per_head", PLAN, 0, "", out=r"kv_heads 32", setup=_model_config(num_key_value_heads=None))),
]


def test_round2_names_are_unique():
    names = [r.probe.name for r in ROWS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("row", ROWS, ids=[r.probe.name for r in ROWS])
def test_round2_probe(row: Row, workspace: Workspace, capsys):
    run_row(row, workspace, capsys)


@pytest.mark.parametrize("setup", [_without_index, _index_params_changed, _corpus_changed_in_the_store],
                         ids=["no_index", "other_parameters", "other_corpus"])
def test_validate_says_what_query_would_say(setup, workspace: Workspace, capsys):
    setup(workspace)
    before = snapshot(workspace.dir)
    code_v = main(["validate", str(workspace.kb)])
    err_v = capsys.readouterr().err
    assert snapshot(workspace.dir) == before, "validate wrote something"
    code_q = main(["query", str(workspace.kb), "refund", "--no-ledger"])
    err_q = capsys.readouterr().err
    assert code_v == code_q == 1 and err_v == err_q, (err_v, err_q)


def test_validate_deep_rehashes_and_the_plain_one_checks_headers_only(workspace: Workspace, capsys):
    """A flipped byte (same size, same mtime) is found by --deep only; the plain check costs no re-hash."""
    workspace.indexed("clean")
    assert main(["validate", str(workspace.kb)]) == 0  # records the verified stamps
    m = json.loads((workspace.dir / "index" / "manifest.json").read_text())
    vec = workspace.dir / "index" / m["vectors_file"]
    st = vec.stat()
    data = bytearray(vec.read_bytes())
    data[-4:] = b"\x7f" * 4
    vec.write_bytes(bytes(data))
    os.utime(vec, ns=(st.st_atime_ns, st.st_mtime_ns))
    capsys.readouterr()
    assert main(["validate", str(workspace.kb)]) == 0
    assert main(["validate", str(workspace.kb), "--deep"]) == 1
    assert "checksum differs" in capsys.readouterr().err


# --- the Python API: one check of text and k, shared with the CLI and the server ---------------

API_CASES = [
    ("empty_text", dict(text=""), "QueryError", r"the query text: the query is empty; give the question as text"),
    ("blank_text", dict(text="   \t"), "QueryError", r"the query is empty"),
    ("text_none", dict(text=None), "QueryError", r"the query text: must be a string, not NoneType"),
    ("text_number", dict(text=42), "QueryError", r"must be a string, not int"),
    ("k_negative", dict(text="refund", k=-3), "QueryError", r"k -3 is out of range: give results per query, from 1 to 10000"),
    ("k_zero", dict(text="refund", k=0), "QueryError", r"k 0 is out of range"),
    ("k_huge", dict(text="refund", k=10_001), "QueryError", r"k 10001 is out of range"),
    ("k_bool", dict(text="refund", k=True), "QueryError", r"k True is not a whole number"),
    ("k_float", dict(text="refund", k=2.5), "QueryError", r"k 2\.5 is not a whole number"),
    ("filter_empty_string", dict(text="refund", filter=""), "FilterError", r"filter '' is empty"),
]


def _ledger_counts(session) -> tuple:
    import sqlalchemy as sa

    with session.ledger.engine.connect() as conn:
        ledger = tuple(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar()
                       for t in ("rc_ledger_runs", "rc_ledger_queries", "rc_ledger_stage_calls"))
    return ledger + (session.pipe.store().count_documents(),)


@pytest.mark.parametrize("name, kwargs, error, match", API_CASES, ids=[c[0] for c in API_CASES])
def test_session_query_refuses_bad_text_and_k(name, kwargs, error, match, workspace: Workspace):
    import ragcost
    import ragcost.errors as E

    workspace.indexed("clean")
    with ragcost.open(workspace.kb) as s:
        before = _ledger_counts(s)
        with pytest.raises(getattr(E, error), match=match) as info:
            s.query(**kwargs)
        assert "\n" not in str(info.value)
        with pytest.raises(getattr(E, error), match=match):
            s.state(**kwargs)  # what the server's batcher calls
        assert _ledger_counts(s) == before, "a refused query wrote to the ledger or the store"


def test_session_k_is_honoured_and_none_is_the_default(workspace: Workspace):
    import ragcost

    workspace.indexed("clean")
    with ragcost.open(workspace.kb, write_ledger=False) as s:
        assert len(s.query("refund", k=1).hits) == 1
        assert len(s.query("refund").hits) == 3  # the retrieve stage's k


@pytest.mark.parametrize("items, k, match", [
    ([("q1", "  ")], None, r"query q1: the query is empty"),
    ([("q1", "refund")], 0, r"k 0 is out of range"),
    ([("q1", "refund")], -1, r"k -1 is out of range"),
], ids=["blank", "k_zero", "k_negative"])
def test_the_library_runner_refuses_what_the_cli_refuses(items, k, match, workspace: Workspace):
    from ragcost.errors import QueryError
    from ragcost.runtime.pipeline import Pipeline
    from ragcost.runtime.query import run_queries

    workspace.indexed("clean")
    before = snapshot(workspace.dir)
    pipe = Pipeline.load(workspace.kb)
    try:
        with pytest.raises(QueryError, match=match):
            run_queries(pipe, items, k=k)
    finally:
        pipe.close()
    assert_intact(before, snapshot(workspace.dir))


# --- --write: one atomic in-place edit (mode, owner, symlink target kept) ----------------------

def _threshold(path: Path) -> None:
    from ragcost.runtime.writeback import write_useful_threshold

    write_useful_threshold(path, 0.42, "test")


def _choice(path: Path, dim: int = 128) -> None:
    from ragcost.evaluate.tune_write import write_choice

    chosen = SimpleNamespace(embed={"model": "all-MiniLM-L6-v2"}, dim=dim, precision="float32", chunking={},
                             index_file=str(REPO / "indexes" / "flat.yaml"), search={}, backend="faiss", kind="flat", build={})
    write_choice(path, chosen, "test")


WRITERS = {"eval_write_threshold": _threshold, "tune_write_choice": _choice}
WRITTEN = {"eval_write_threshold": "threshold: 0.42", "tune_write_choice": "dim: 128"}


def _as_link(ws: Workspace) -> tuple[Path, Path]:
    """kb.yaml becomes a relative symlink to real/kb.yaml (paths inside it still resolve from ws)."""
    (ws.dir / "real").mkdir()
    real = ws.dir / "real" / "kb.yaml"
    os.replace(ws.kb, real)
    ws.kb.symlink_to("real/kb.yaml")
    return ws.kb, real


FILE_CASES = ["mode_0600", "mode_0640", "symlink", "other_owner"]


@pytest.mark.parametrize("case", FILE_CASES)
@pytest.mark.parametrize("writer", list(WRITERS))
def test_write_edits_in_place(writer, case, workspace: Workspace):
    path, real = workspace.kb, workspace.kb
    if case == "mode_0600":
        os.chmod(real, 0o600)
    elif case == "mode_0640":
        os.chmod(real, 0o640)
    elif case == "symlink":
        path, real = _as_link(workspace)
        os.chmod(real, 0o600)
    elif case == "other_owner":
        if os.geteuid() != 0:
            pytest.skip("giving a file another owner needs root")
        os.chown(real, 4242, 4343)
    st = real.stat()
    WRITERS[writer](path)
    after = real.stat()
    assert WRITTEN[writer] in real.read_text()
    assert stat.S_IMODE(after.st_mode) == stat.S_IMODE(st.st_mode)
    assert (after.st_uid, after.st_gid) == (st.st_uid, st.st_gid)
    if case == "symlink":
        assert path.is_symlink() and os.readlink(path) == "real/kb.yaml"
    leftovers = [p.name for p in workspace.dir.rglob(".*.tmp")]
    assert not leftovers, leftovers


@pytest.mark.parametrize("writer", list(WRITERS))
def test_write_to_a_0444_file_is_refused_and_nothing_changes(writer, workspace: Workspace):
    from ragcost.errors import ConfigError

    os.chmod(workspace.kb, 0o444)
    before = snapshot(workspace.dir)
    with pytest.raises(ConfigError, match=r"is read-only \(mode 0444\)"):
        WRITERS[writer](workspace.kb)
    assert_intact(before, snapshot(workspace.dir))


def test_tune_write_of_a_pipeline_that_would_not_load_changes_nothing(workspace: Workspace):
    from ragcost.errors import ConfigError

    before = snapshot(workspace.dir)
    with pytest.raises(ConfigError, match=r"embed\.dim.*not written: .*kb\.yaml is unchanged"):
        _choice(workspace.kb, dim=-1)
    assert_intact(before, snapshot(workspace.dir))


def test_tune_write_of_the_pipelines_own_inline_index_writes_it_inline(workspace: Workspace):
    """tune's baseline candidate names the pipeline file as its index file; it is not an index YAML."""
    from ragcost.evaluate.tune_write import write_choice
    from ragcost.runtime.pipeline import Pipeline

    chosen = SimpleNamespace(embed={"model": "all-MiniLM-L6-v2"}, dim=384, precision="float32", chunking={},
                             index_file=str(workspace.kb), search={"ef": 32}, backend="hnswlib", kind="hnsw",
                             build={"M": 8, "ef_construction": 64})
    write_choice(workspace.kb, chosen, "test")
    ic = Pipeline.load(workspace.kb).index_config
    assert (ic.backend, ic.kind, dict(ic.build), dict(ic.search)) == ("hnswlib", "hnsw", {"M": 8, "ef_construction": 64}, {"ef": 32})


def test_tune_write_end_to_end_keeps_0600_and_edits_the_symlinks_target(workspace: Workspace, capsys):
    _synthetic_eval(workspace)
    (workspace.dir / "real").mkdir()
    real = workspace.dir / "real" / "pipe.yaml"
    os.replace(workspace.dir / "pipe.yaml", real)
    (workspace.dir / "pipe.yaml").symlink_to("real/pipe.yaml")
    os.chmod(real, 0o600)
    code = main([*[a.replace("{dir}", str(workspace.dir)) for a in TUNE], "--write"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (workspace.dir / "pipe.yaml").is_symlink() and "# ragcost tune:" in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


# --- the store lock: who holds it, and the hint that fits --------------------------------------

HOLDER = "import sys, duckdb\ncon = duckdb.connect(sys.argv[-1])\nprint('held', flush=True)\nsys.stdin.read()\n"
_HOLDERS: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _stop_holders():
    yield
    while _HOLDERS:
        p = _HOLDERS.pop()
        p.stdin.close()
        p.wait(timeout=30)


def hold(ws: Workspace, db: Path, command: Optional[str]) -> int:
    """A second process holding ``db``'s DuckDB lock, its command line ``ragcost COMMAND ...`` (None: a plain script)."""
    script = ws.dir.parent / ("bin/ragcost" if command else "bin/holder.py")  # outside the probe's folder
    script.parent.mkdir(exist_ok=True)
    script.write_text(HOLDER)
    p = subprocess.Popen([sys.executable, str(script), *([command, "kb.yaml"] if command else []), str(db)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    _HOLDERS.append(p)
    assert p.stdout.readline().strip() == "held"
    return p.pid


def _held_by(command: Optional[str]) -> Callable[[Workspace], None]:
    def setup(ws: Workspace) -> None:
        ws.indexed("clean")
        hold(ws, ws.dir / "kb.duckdb", command)
    return setup


NO_PG = r"^(?!.*PostgreSQL)"
LOCK_ROWS: list[Row] = [
    Row(Probe("lock_held_by_a_server_is_named", (*Q, "refund"), 1,
              r"store .*kb\.duckdb is held by a `ragcost serve` server \(PID \d+\): stop that server first, or use a PostgreSQL store",
              setup=_held_by("serve"))),
    Row(Probe("lock_held_by_an_index_run_is_named", (*Q, "refund"), 1,
              r"held by an index run \(`ragcost index`\) \(PID \d+\): wait for it to finish, or use a PostgreSQL store, which allows queries while indexing",
              setup=_held_by("index"))),
    Row(Probe("lock_held_by_an_eval_is_named_without_postgresql", (*Q, "refund"), 1,
              NO_PG + r".*held by a `ragcost eval` run \(PID \d+\): wait for it to finish, or give this run its own cache with --cache-dir DIR",
              setup=_held_by("eval"))),
    Row(Probe("lock_held_by_another_program_says_so", (*Q, "refund"), 1, NO_PG + r".*held by another process \(PID \d+\): wait for it",
              setup=_held_by(None))),
    Row(Probe("cache_stats_on_a_store_a_server_holds", ("cache", "stats", "{kb}"), 1,
              r"^error: cache store .*kb\.duckdb is held by a `ragcost serve` server \(PID \d+\): stop that server first",
              setup=lambda ws: (_held_by("serve")(ws), ws.pipeline(stages=[{"type": "cache"}, {"type": "retrieve", "k": 3}])))),
    Row(Probe("report_on_a_ledger_a_server_holds", ("report", "--ledger", "duckdb:///{dir}/kb.duckdb"), 1,
              r"ledger .*kb\.duckdb is held by a `ragcost serve` server \(PID \d+\)", setup=_held_by("serve"))),
]


@pytest.mark.parametrize("row", LOCK_ROWS, ids=[r.probe.name for r in LOCK_ROWS])
def test_lock_probe(row: Row, workspace: Workspace, capsys):
    run_row(row, workspace, capsys)


def test_the_eval_cache_held_by_another_eval_names_it_and_offers_no_postgresql(workspace: Workspace, capsys):
    from ragcost.evaluate.spec import load_spec
    from ragcost.evaluate.vectors import cache_key
    from ragcost.runtime.pipeline import Pipeline

    _synthetic_eval(workspace)
    ls = load_spec(workspace.dir / "spec.yaml")
    pipe = Pipeline.load(ls.pipeline_path, judge=False)
    cache = workspace.dir / "cache"
    cache.mkdir()
    db = cache / f"{cache_key(pipe, ls.dataset_path)}.duckdb"
    import duckdb

    duckdb.connect(str(db)).close()  # the other eval made it
    pipe.close()
    pid = hold(workspace, db, "eval")
    before = snapshot(workspace.dir)
    code = main([a.replace("{dir}", str(workspace.dir)) for a in EVAL])
    err = PROGRESS.sub("", capsys.readouterr().err)
    assert code == 1 and err.count("\n") == 1, err
    assert f"is held by a `ragcost eval` run (PID {pid}): wait for it to finish, or give this run its own cache with --cache-dir DIR" in err
    assert "PostgreSQL" not in err
    assert_intact(before, snapshot(workspace.dir), may_write=r"^cache/.*\.(npz|wal)$")


@pytest.mark.parametrize("message, pid, holder", [
    ('IO Error: Could not set lock on file "/x/kb.duckdb": Conflicting lock is held in /usr/bin/python3.12 (PID 999999) by user u.', 999999, None),
    ("IO Error: Could not set lock on file: no PID here", None, None),
])
def test_lock_holder_reads_the_pid_duckdb_names(message, pid, holder):
    from ragcost.store.sql_errors import lock_holder

    assert lock_holder(message) == (pid, holder)


# --- full and read-only disks -------------------------------------------------------------------

def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    _MOUNTS.append(where)


def _remount_read_only(where: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)


_MOUNTS: list[Path] = []


@pytest.fixture(autouse=True)
def _unmount():
    yield
    while _MOUNTS:
        subprocess.run(["umount", "-l", str(_MOUNTS.pop())], check=False)


def _fill(folder: Path) -> None:
    """Use up the space left on ``folder``'s disk."""
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC


def _grow_corpus(ws: Workspace) -> None:
    with (ws.dir / "kb.jsonl").open("a", encoding="utf-8") as f:  # a change, so the index is rebuilt
        f.write(json.dumps({"id": "kb-9", "title": "New", "text": "A new document about invoices and refunds."}) + "\n")


def _index_dir_on(ws: Workspace, kind: str, **overrides: Any) -> None:
    """The live index on a small tmpfs; the corpus grows, so `index` must write a new build there."""
    ws.indexed("clean")
    disk = ws.dir / "disk"
    _mount_tmpfs(disk, "1m")
    shutil.copytree(ws.dir / "index", disk / "index", copy_function=shutil.copy2)
    ws.pipeline(index_dir=str(disk / "index"), **overrides)
    _grow_corpus(ws)
    if kind == "full":
        _fill(disk)
    else:
        _remount_read_only(disk)


def _enospc_on_the_vectors_write(ws: Workspace) -> None:
    """No small disk needed: the vectors file's write raises ENOSPC after the index file was written."""
    import ragcost.index.artifact as artifact

    ws.indexed("clean")
    _grow_corpus(ws)
    real = artifact._npy_writer

    def writer(array):
        def write(path: Path) -> None:
            real(array)(path)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write

    ws.monkeypatch.setattr(artifact, "_npy_writer", writer)


def _store_on_a_full_disk(ws: Workspace) -> None:
    disk = ws.dir / "disk"
    _mount_tmpfs(disk, "1m")
    ws.pipeline(store=f"duckdb:///{disk / 'kb.duckdb'}")
    _fill(disk)


def _store_on_a_read_only_disk(ws: Workspace) -> None:
    ws.indexed("clean")
    disk = ws.dir / "disk"
    _mount_tmpfs(disk, "8m")
    shutil.copy2(ws.dir / "kb.duckdb", disk / "kb.duckdb")
    ws.pipeline(store=f"duckdb:///{disk / 'kb.duckdb'}")
    _grow_corpus(ws)
    _remount_read_only(disk)


DISK_ROWS: list[Row] = [
    Row(Probe("index_on_a_full_disk_names_it_and_keeps_the_live_index", ("index", "{kb}"), 1,
              r"index .*disk/index: writing the built index failed: .*the disk is full \(no space left on device\); free space on it.*"
              r"nothing of this build was kept", setup=lambda ws: _index_dir_on(ws, "full")), may_write=r"^kb\.duckdb"),
    Row(Probe("index_faiss_on_a_full_disk_names_it", ("index", "{kb}"), 1,
              r"writing the built index failed: the disk is full.*nothing of this build was kept",
              setup=lambda ws: _index_dir_on(ws, "full", index={"backend": "faiss", "kind": "flat"})), may_write=r"^kb\.duckdb"),
    Row(Probe("index_on_a_read_only_disk_names_it", ("index", "{kb}"), 1,
              r"the file system is read-only; point the pipeline's store and index_dir at a writable folder",
              setup=lambda ws: _index_dir_on(ws, "ro")), may_write=r"^kb\.duckdb"),
    Row(Probe("index_enospc_on_a_write_leaves_no_partial_build", ("index", "{kb}"), 1,
              r"writing the built index failed: .*the disk is full.*nothing of this build was kept",
              setup=_enospc_on_the_vectors_write), may_write=r"^kb\.duckdb"),
    Row(Probe("index_store_on_a_full_disk_names_it", ("index", "{kb}"), 1,
              r"store .*kb\.duckdb.*the disk is full \(no space left on device\)", setup=_store_on_a_full_disk)),
    Row(Probe("index_store_on_a_read_only_disk_names_it", ("index", "{kb}"), 1,
              r"store .*kb\.duckdb.*the file system is read-only", setup=_store_on_a_read_only_disk)),
]


@pytest.mark.parametrize("row", DISK_ROWS, ids=[r.probe.name for r in DISK_ROWS])
def test_disk_probe(row: Row, workspace: Workspace, capsys):
    run_row(row, workspace, capsys)


def test_report_reads_a_ledger_on_a_read_only_disk(workspace: Workspace, capsys):
    workspace.indexed("clean")
    assert main(["query", str(workspace.kb), "refund"]) == 0  # one query in the ledger
    disk = workspace.dir / "disk"
    _mount_tmpfs(disk, "8m")
    shutil.copy2(workspace.dir / "kb.duckdb", disk / "kb.duckdb")
    os.chmod(disk / "kb.duckdb", 0o444)
    _remount_read_only(disk)
    capsys.readouterr()
    before = snapshot(workspace.dir)
    code = main(["report", "--ledger", f"duckdb:///{disk / 'kb.duckdb'}", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["totals"]["queries"] == 1
    assert_intact(before, snapshot(workspace.dir))
