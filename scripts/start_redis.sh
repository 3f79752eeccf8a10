#!/usr/bin/env bash
# Start a throwaway Redis on 127.0.0.1 for the answer-cache tests; prints its URL.
# Usage: eval "$(scripts/start_redis.sh)"   -> exports RAGCOST_TEST_REDIS_URL
set -euo pipefail
PORT=${RAGCOST_REDIS_PORT:-56379}
DIR=${RAGCOST_REDIS_DIR:-/tmp/ragcost-redis}
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >&2
  else
    echo "echo 'redis-server is not installed; Redis tests will be skipped' >&2"; exit 0
  fi
fi
mkdir -p "$DIR"
if ! redis-cli -h 127.0.0.1 -p "$PORT" ping >/dev/null 2>&1; then
  redis-server --bind 127.0.0.1 --port "$PORT" --dir "$DIR" --save '' --appendonly no --daemonize yes \
    --pidfile "$DIR/redis.pid" --logfile "$DIR/log" >/dev/null
  for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  echo 'export RAGCOST_STARTED="${RAGCOST_STARTED:-} redis"'  # scripts/stop_services.sh stops what this started
fi
echo "export RAGCOST_TEST_REDIS_URL=redis://127.0.0.1:$PORT/0"
