#!/usr/bin/env bash
# Start a throwaway PostgreSQL on 127.0.0.1 for the store/ledger tests; prints its SQLAlchemy URL.
# Usage: eval "$(scripts/start_postgres.sh)"   -> exports RAGCOST_TEST_POSTGRES_URL
set -euo pipefail
PORT=${RAGCOST_PG_PORT:-55432}
DIR=${RAGCOST_PG_DIR:-/tmp/ragcost-pg}
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$BIN" ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
    BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  else
    echo "echo 'postgresql is not installed; PostgreSQL tests will be skipped' >&2"; exit 0
  fi
fi
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if ! as_pg "$BIN/pg_ctl" -D "$DIR" status >/dev/null 2>&1; then
  rm -rf "$DIR"; mkdir -p "$DIR"; [ "$(id -u)" = 0 ] && chown postgres "$DIR"
  as_pg "$BIN/initdb" -D "$DIR" -U postgres -A trust >/dev/null
  as_pg "$BIN/pg_ctl" -D "$DIR" -l "$DIR/log" -w -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1" start >/dev/null
  echo 'export RAGCOST_STARTED="${RAGCOST_STARTED:-} postgres"'  # scripts/stop_services.sh stops what this started
fi
echo "export RAGCOST_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"
