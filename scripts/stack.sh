#!/usr/bin/env bash
# The local service: Kafka (scripts/kafka.sh), and one process (python -m server) running the stream
# worker and the ranker's HTTP API with embedded Milvus Lite (one process per Milvus Lite file).
#
#   scripts/stack.sh up     start what is not running; print where things are
#   scripts/stack.sh down   stop what `up` started, by pid
#
# STACK_EDGES=N (default 0) adds N HTTP processes (python -m ranker) on the same port
# (MNEMO_REUSE_PORT: the kernel spreads connections over the processes), reaching the worker's
# Milvus Lite through its local gRPC address (var/milvus.endpoint): recall then uses more than
# one core. They follow the topics as a split deployment does: a read-your-writes token on one of
# them waits for the worker's offset commit, and a row written since its start is read back from
# Milvus at its tenant's next search (docs/benchmarks.md, "Several HTTP processes").
#
# State lives in var/: tenants.json (a demo tenant and API key, made once), worker data (RocksDB),
# milvus.db (Milvus Lite), logs and pid files (NAME.pid, and NAME.pid.start: the process's start
# time). Settings: the MNEMO_* variables (storage/, streams/ and ranker/settings.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
var=$root/var
py=$root/.venv/bin/python
mkdir -p "$var"

# shellcheck source=scripts/pidfile.sh
. "$root/scripts/pidfile.sh"

running() { pid_running "$1"; }

tenants() {
  if [ ! -f "$var/tenants.json" ]; then
    "$py" - "$var/tenants.json" <<'PY'
import json, secrets, sys
key = "mk-" + secrets.token_hex(16)
json.dump({"tenants": {"demo": {"api_keys": [key]}}}, open(sys.argv[1], "w"), indent=2)
PY
  fi
}

# start NAME READY ARGS...: run python ARGS in the background (log var/NAME.log, pid var/NAME.pid)
# and wait until its log matches READY (an extended regular expression)
start() {
  local name=$1 ready=$2 started=$SECONDS
  shift 2
  [ -f "$var/$name.log" ] && mv "$var/$name.log" "$var/$name.log.1"  # readiness is read from a fresh log
  nohup "$py" "$@" >"$var/$name.log" 2>&1 </dev/null &
  record_pid "$var/$name.pid" $!
  until grep -qE "$ready" "$var/$name.log" 2>/dev/null; do
    if ! running "$var/$name.pid"; then echo "$name exited; see $var/$name.log" >&2; tail -n 20 "$var/$name.log" >&2; exit 1; fi
    if [ $((SECONDS - started)) -ge "$wait_s" ]; then echo "$name not ready after $wait_s s (STACK_READY_TIMEOUT_S); it still runs (make down stops it); see $var/$name.log" >&2; exit 1; fi
    sleep 0.5
  done
  echo "$name: ready (pid $(cat "$var/$name.pid"), log $var/$name.log)"
}

up() {
  "$root/scripts/kafka.sh" start
  tenants
  export MNEMO_KAFKA_BOOTSTRAP=${MNEMO_KAFKA_BOOTSTRAP:-127.0.0.1:${KAFKA_PORT:-9092}}
  export MNEMO_TENANTS_FILE=${MNEMO_TENANTS_FILE:-$var/tenants.json}
  export MNEMO_DATA_DIR=${MNEMO_DATA_DIR:-$var/worker}
  export MNEMO_MILVUS_URI=${MNEMO_MILVUS_URI:-$var/milvus.db}
  local edges=${STACK_EDGES:-0} wait_s=${STACK_READY_TIMEOUT_S:-900}  # a restart over 100k memories: resync + hot-cache preload, ~4-5 min here
  case $wait_s in ''|*[!0-9]*) echo "STACK_READY_TIMEOUT_S must be whole seconds, not '$wait_s'" >&2; exit 1;; esac
  case $edges in ''|*[!0-9]*) echo "STACK_EDGES must be a whole number of processes, not '$edges'" >&2; exit 1;; esac
  if [ "$edges" -gt 0 ]; then export MNEMO_REUSE_PORT=true; fi
  export MNEMO_MILVUS_ENDPOINT_FILE=${MNEMO_MILVUS_ENDPOINT_FILE:-$var/milvus.endpoint}
  local i f
  # an HTTP process is ready once its hot cache is loaded: recalls before that search Milvus
  # (on Lite a pass over the collection per tenant, seconds each at 100k memories)
  local loaded='hot cache: [0-9]+ rows|hot cache preload failed|ranker ready \(no hot cache\)'
  if running "$var/worker.pid"; then
    echo "worker: already running (pid $(cat "$var/worker.pid"))"
    if [ "$edges" -gt 0 ] && { [ ! -f "$var/worker.shares-port" ] || [ ! -s "$MNEMO_MILVUS_ENDPOINT_FILE" ]; }; then
      echo "the running worker does not share its port (started without STACK_EDGES): make down, then make up STACK_EDGES=$edges" >&2; exit 1
    fi
  else
    cd "$root"
    stop_edges  # edges of an earlier worker hold its Milvus address, gone with it
    rm -f "$MNEMO_MILVUS_ENDPOINT_FILE" "$var/worker.shares-port"  # a stale address would name another process's port
    if [ "$edges" -gt 0 ]; then touch "$var/worker.shares-port"; fi
    start worker "$loaded" -m server
  fi
  for f in "$var"/edge-*.pid; do  # edges beyond STACK_EDGES (a smaller number than last time)
    i=$(basename "$f" .pid); i=${i#edge-}
    if [ -e "$f" ] && [ "$i" -gt "$edges" ]; then stop "edge-$i"; fi
  done
  for i in $(seq 1 "$edges"); do
    if running "$var/edge-$i.pid"; then echo "edge-$i: already running (pid $(cat "$var/edge-$i.pid"))"; continue; fi
    MNEMO_MILVUS_URI=$(cat "$MNEMO_MILVUS_ENDPOINT_FILE") start "edge-$i" "$loaded" -m ranker
  done
  echo "kafka:   $MNEMO_KAFKA_BOOTSTRAP   topics: memory-writes, access-events, consolidation, audit, dead-letter, tenants, memory-keys"
  case $MNEMO_MILVUS_URI in
    http://*|https://*|tcp://*) echo "milvus:  $MNEMO_MILVUS_URI (a Milvus server)";;
    *) echo "milvus:  $MNEMO_MILVUS_URI (Milvus Lite, embedded in the worker)";;
  esac
  echo "tenants: $MNEMO_TENANTS_FILE"
  echo "ranker:  http://${MNEMO_HOST:-127.0.0.1}:${MNEMO_PORT:-8080}  (OpenAPI at /docs; HTTP processes: $((edges + 1)))"
  # the first tenant's plain key, where the file holds one (a file of digests only shows none)
  echo "api key: $("$py" -c 'import json,sys; t=json.load(open(sys.argv[1]))["tenants"]; k=[(i, e["api_keys"][0]) for i, e in t.items() if e.get("api_keys")]; print(f"{k[0][1]}  (tenant {k[0][0]})" if k else "(the tenants file holds key digests only)")' "$MNEMO_TENANTS_FILE")"
}

# stop NAME: stop the process of var/NAME.pid (TERM, then KILL after 60 s: the server lets requests in
# flight and the ranker's shutdown take up to 30 s before the worker's own)
stop() {
  local name=$1 pid
  if running "$var/$name.pid"; then
    pid=$(cat "$var/$name.pid")
    kill "$pid" 2>/dev/null || true  # it may have exited since
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
    echo "$name: stopped (pid $pid)"
  fi
  rm -f "$var/$name.pid" "$var/$name.pid.start"
}

# stop_edges: stop every extra HTTP process (var/edge-*.pid)
stop_edges() {
  local f
  for f in "$var"/edge-*.pid; do [ -e "$f" ] && stop "$(basename "$f" .pid)"; done
  return 0
}

down() {
  stop_edges
  stop worker
  rm -f "${MNEMO_MILVUS_ENDPOINT_FILE:-$var/milvus.endpoint}" "$var/worker.shares-port"
  "$root/scripts/kafka.sh" stop
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
