#!/usr/bin/env bash
# A real Apache Kafka 4 broker (KRaft, one combined broker+controller on 127.0.0.1), without Docker.
#
#   scripts/kafka.sh fetch    copy the pinned jars from Maven Central (scripts/kafka/pom.xml) into $KAFKA_HOME/lib
#   scripts/kafka.sh start    fetch if needed, format storage once, start, wait until the port accepts
#   scripts/kafka.sh stop     stop the broker started here, by its pid (and start time)
#   scripts/kafka.sh status   exit 0 when the broker started here is running
#
# Settings (environment): KAFKA_HOME (var/kafka), KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (port+1),
# KAFKA_START_TIMEOUT seconds (90), KAFKA_HEAP (-Xms256m -Xmx1g),
# KAFKA_SASL_PLAIN_USERS ("user:password ..."; set: clients must authenticate with SASL PLAIN on the port),
# KAFKA_SSL_CERT + KAFKA_SSL_KEY (PEM files: the broker's certificate chain and unencrypted PKCS#8 key;
# set: the port speaks TLS only, SSL or SASL_SSL with SASL users), KAFKA_SSL_CA (PEM: the CA the broker
# trusts, for its own inter-broker connections and client certificates),
# KAFKA_SSL_CLIENT_AUTH (none, requested or required: clients need a certificate signed by KAFKA_SSL_CA).
# A cluster: KAFKA_NODE_ID, KAFKA_VOTERS ("1@127.0.0.1:PORT,2@...": the controllers, static quorum),
# KAFKA_CLUSTER_ID (the same for every node), KAFKA_INTERNAL_RF (replicas of Kafka's own topics).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
home=${KAFKA_HOME:-$root/var/kafka}
port=${KAFKA_PORT:-9092}
cport=${KAFKA_CONTROLLER_PORT:-$((port + 1))}
timeout=${KAFKA_START_TIMEOUT:-90}
pidfile=$home/broker.pid

fetch() {
  if [ -f "$home/lib/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || { echo "kafka.sh: mvn is needed to fetch the Kafka jars" >&2; exit 1; }
  mkdir -p "$home/lib"
  mvn -q -B -Dstyle.color=never -f "$root/scripts/kafka/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$home/lib" -DincludeScope=runtime
  touch "$home/lib/.complete"
}

# shellcheck source=scripts/pidfile.sh
. "$root/scripts/pidfile.sh"

running() { pid_running "$pidfile"; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

configure() {
  mkdir -p "$home/config" "$home/data"
  local listener=PLAINTEXT sasl="" quorum="controller.quorum.bootstrap.servers=127.0.0.1:$cport"
  if [ -n "${KAFKA_VOTERS:-}" ]; then quorum="controller.quorum.voters=$KAFKA_VOTERS"; fi
  local tls="" ssl=""
  if [ -n "${KAFKA_SSL_CERT:-}${KAFKA_SSL_KEY:-}" ]; then
    [ -r "${KAFKA_SSL_CERT:-}" ] && [ -r "${KAFKA_SSL_KEY:-}" ] \
      || { echo "kafka.sh: KAFKA_SSL_CERT and KAFKA_SSL_KEY must both name readable PEM files" >&2; exit 1; }
    tls=1 listener=SSL
    (umask 077 && cat "$KAFKA_SSL_KEY" "$KAFKA_SSL_CERT" >"$home/config/keystore.pem")
    ssl="ssl.keystore.type=PEM
ssl.keystore.location=$home/config/keystore.pem
ssl.client.auth=${KAFKA_SSL_CLIENT_AUTH:-none}"
    if [ -n "${KAFKA_SSL_CA:-}" ]; then
      ssl="$ssl
ssl.truststore.type=PEM
ssl.truststore.location=$KAFKA_SSL_CA"
    fi
  fi
  if [ -n "${KAFKA_SASL_PLAIN_USERS:-}" ]; then
    if [ -n "$tls" ]; then listener=SASL_SSL; else listener=SASL_PLAINTEXT; fi
    local users="" pair
    for pair in $KAFKA_SASL_PLAIN_USERS; do users="$users user_${pair%%:*}=\"${pair#*:}\""; done
    sasl="sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.${listener,,}.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"broker\" password=\"broker-secret\" user_broker=\"broker-secret\"$users;"
  fi
  cat >"$home/config/server.properties" <<PROPS
process.roles=broker,controller
node.id=${KAFKA_NODE_ID:-1}
$quorum
listeners=$listener://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=$listener://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
controller.listener.names=CONTROLLER
inter.broker.listener.name=$listener
listener.security.protocol.map=CONTROLLER:PLAINTEXT,$listener:$listener
$sasl
$ssl
log.dirs=$home/data
num.partitions=1
offsets.topic.replication.factor=${KAFKA_INTERNAL_RF:-1}
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=${KAFKA_INTERNAL_RF:-1}
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=${KAFKA_INTERNAL_RF:-1}
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
auto.create.topics.enable=false
log.retention.hours=-1
PROPS
}

start() {
  if running; then echo "kafka: already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"; return 0; fi
  if port_open; then echo "kafka.sh: 127.0.0.1:$port is taken by another process" >&2; exit 1; fi
  fetch
  configure
  local cp="$home/lib/*" started=$SECONDS
  if [ ! -f "$home/data/meta.properties" ]; then
    local id=${KAFKA_CLUSTER_ID:-} mode=--standalone
    [ -n "$id" ] || id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
    [ -z "${KAFKA_VOTERS:-}" ] || mode=""  # a static quorum: the voters are in the config
    java -Dlog4j2.configurationFile="$root/scripts/kafka/log4j2.properties" -cp "$cp" \
      kafka.tools.StorageTool format ${mode:+"$mode"} -t "$id" -c "$home/config/server.properties" >"$home/format.log" 2>&1
  fi
  # shellcheck disable=SC2086
  nohup java ${KAFKA_HEAP:--Xms256m -Xmx1g} -XX:+UseG1GC \
    -Dlog4j2.configurationFile="$root/scripts/kafka/log4j2.properties" \
    -cp "$cp" kafka.Kafka "$home/config/server.properties" >"$home/broker.log" 2>&1 </dev/null &
  record_pid "$pidfile" $!
  while ! port_open; do
    if ! running; then echo "kafka.sh: the broker exited; last lines of $home/broker.log:" >&2; tail -n 20 "$home/broker.log" >&2; exit 1; fi
    if [ $((SECONDS - started)) -ge "$timeout" ]; then echo "kafka.sh: no broker on 127.0.0.1:$port after ${timeout}s" >&2; stop; exit 1; fi
    sleep 0.2
  done
  echo "kafka: ready on 127.0.0.1:$port (pid $(cat "$pidfile"), $((SECONDS - started)) s)"
}

stop() {
  if ! running; then rm -f "$pidfile" "$pidfile.start"; echo "kafka: not running"; return 0; fi
  local pid
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || true  # it may have exited since
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$pidfile" "$pidfile.start"
  echo "kafka: stopped (pid $pid)"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  status) running ;;
  *) echo "usage: $0 fetch|start|stop|status" >&2; exit 2 ;;
esac
