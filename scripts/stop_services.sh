#!/usr/bin/env bash
# Stop the throwaway servers that scripts/start_*.sh started, by name: postgres, pgvector, redis.
# Usage: bash scripts/stop_services.sh $RAGCOST_STARTED   (the start scripts add to RAGCOST_STARTED
# only a server they started, so one that was already running, e.g. a developer's, is left alone)
set -uo pipefail
stop_pid() {  # fast shutdown (SIGINT for PostgreSQL), then wait up to 30 s for the process to go
  local pid=$1 sig=$2
  kill "-$sig" "$pid" 2>/dev/null || return 0
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  echo "stop_services: process $pid did not stop within 30 s" >&2
}
for name in "$@"; do
  case "$name" in
    postgres) dir=${RAGCOST_PG_DIR:-/tmp/ragcost-pg} ;;
    pgvector) dir=${RAGCOST_PGVECTOR_DIR:-/tmp/ragcost-pgvector} ;;
    redis)
      pidfile=${RAGCOST_REDIS_DIR:-/tmp/ragcost-redis}/redis.pid
      [ -s "$pidfile" ] && stop_pid "$(cat "$pidfile")" TERM
      continue ;;
    *) echo "stop_services: unknown service '$name' (postgres, pgvector or redis)" >&2; continue ;;
  esac
  [ -s "$dir/postmaster.pid" ] && stop_pid "$(head -1 "$dir/postmaster.pid")" INT
done
exit 0
