#!/usr/bin/env bash
# The local service: Kafka (scripts/kafka.sh), and one process (python -m server) running the stream
# worker and the ranker's HTTP API with embedded Milvus Lite (one process per Milvus Lite file).
#
#   scripts/stack.sh up     start what is not running; print where things are
#   scripts/stack.sh down   stop what `up` started, by pid
#
# State lives in var/: tenants.json (a demo tenant and API key, made once), worker data (RocksDB),
# milvus.db (Milvus Lite), logs and pid files. Settings: the MNEMO_* variables (streams/settings.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
var=$root/var
py=$root/.venv/bin/python
mkdir -p "$var"

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

tenants() {
  if [ ! -f "$var/tenants.json" ]; then
    "$py" - "$var/tenants.json" <<'PY'
import json, secrets, sys
key = "mk-" + secrets.token_hex(16)
json.dump({"tenants": {"demo": {"api_keys": [key]}}}, open(sys.argv[1], "w"), indent=2)
PY
  fi
}

up() {
  "$root/scripts/kafka.sh" start
  tenants
  export MNEMO_KAFKA_BOOTSTRAP=${MNEMO_KAFKA_BOOTSTRAP:-127.0.0.1:${KAFKA_PORT:-9092}}
  export MNEMO_TENANTS_FILE=${MNEMO_TENANTS_FILE:-$var/tenants.json}
  export MNEMO_DATA_DIR=${MNEMO_DATA_DIR:-$var/worker}
  export MNEMO_MILVUS_URI=${MNEMO_MILVUS_URI:-$var/milvus.db}
  if running "$var/worker.pid"; then
    echo "worker: already running (pid $(cat "$var/worker.pid"))"
  else
    cd "$root"
    [ -f "$var/worker.log" ] && mv "$var/worker.log" "$var/worker.log.1"  # readiness is read from a fresh log
    nohup "$py" -m server >"$var/worker.log" 2>&1 </dev/null &
    echo $! >"$var/worker.pid"
    local started=$SECONDS wait_s=${STACK_READY_TIMEOUT_S:-900}  # a restart over 100k memories: resync + hot-cache preload, ~4-5 min here
    case $wait_s in ''|*[!0-9]*) echo "STACK_READY_TIMEOUT_S must be whole seconds, not '$wait_s'" >&2; exit 1;; esac
    until grep -q "mnemostream ranker ready" "$var/worker.log" 2>/dev/null; do
      if ! running "$var/worker.pid"; then echo "worker exited; see $var/worker.log" >&2; tail -n 20 "$var/worker.log" >&2; exit 1; fi
      if [ $((SECONDS - started)) -ge "$wait_s" ]; then echo "worker not ready after $wait_s s (STACK_READY_TIMEOUT_S); it still runs (make down stops it); see $var/worker.log" >&2; exit 1; fi
      sleep 0.5
    done
    echo "worker: ready (pid $(cat "$var/worker.pid"), log $var/worker.log)"
  fi
  echo "kafka:   $MNEMO_KAFKA_BOOTSTRAP   topics: memory-writes, access-events, consolidation, audit, dead-letter"
  echo "milvus:  $MNEMO_MILVUS_URI (Milvus Lite, embedded in the worker)"
  echo "tenants: $MNEMO_TENANTS_FILE"
  echo "ranker:  http://${MNEMO_HOST:-127.0.0.1}:${MNEMO_PORT:-8080}  (OpenAPI at /docs)"
  echo "api key: $("$py" -c 'import json,sys; print(next(iter(json.load(open(sys.argv[1]))["tenants"].values()))["api_keys"][0])' "$MNEMO_TENANTS_FILE")  (tenant demo)"
}

down() {
  if running "$var/worker.pid"; then
    local pid
    pid=$(cat "$var/worker.pid")
    kill "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "worker: stopped (pid $pid)"
  fi
  rm -f "$var/worker.pid"
  "$root/scripts/kafka.sh" stop
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
