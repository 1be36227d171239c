#!/usr/bin/env bash
# Starts a local 3-node coordinator quorum on 127.0.0.1:7001-7003 and a broker shim on
# 127.0.0.1:9192 storing WAL segments in a local directory; everything under ./data/local.
# Prometheus metrics: the nodes on http://127.0.0.1:9101-9103/metrics, the broker on :9109
# (deploy/prometheus/prometheus.yml scrapes exactly these).
#
#   deploy/local/run.sh            # build (first time: RocksDB takes minutes), start, show status
#   DATA=/tmp/q PROFILE=release deploy/local/run.sh
#   deploy/local/run.sh --tls      # mutual TLS: a CA and certificates in $DATA/certs (coordctl
#                                  # certs), peer listeners on 127.0.0.1:7101-7103, roles; the
#                                  # broker also gets a SASL_SSL Kafka listener on :9094 (SCRAM
#                                  # user "demo", password $KAFKA_PASSWORD, default demo-secret),
#                                  # and authorizes by ACLs, "demo" its super user
#
# Ctrl-C stops the nodes (SIGTERM: clean shutdown). Running it again restarts the same cluster
# from its data (bootstrapping is idempotent). Logs: $DATA/node-N.log.
set -euo pipefail
TLS=0
for a in "$@"; do
  case "$a" in
    --tls) TLS=1 ;;
    *) echo "usage: $0 [--tls]" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/../.."
DATA=${DATA:-$PWD/data/local}
PROFILE=${PROFILE:-dev}
GROUPS_N=${METADATA_PARTITIONS:-3}
BASE_PORT=${BASE_PORT:-7001}
BROKER_PORT=${BROKER_PORT:-9192}
KAFKA_PORT=${KAFKA_PORT:-9092}
KAFKA_SASL_PORT=${KAFKA_SASL_PORT:-9094}   # with --tls: a SASL_SSL Kafka listener
KAFKA_PASSWORD=${KAFKA_PASSWORD:-demo-secret}
METRICS_PORT=${METRICS_PORT:-9101}   # nodes: METRICS_PORT..+2; broker: METRICS_PORT + 8
PEER_PORT=${PEER_PORT:-7101}         # with --tls: the nodes' peer listeners, PEER_PORT..+2
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/diskless-target}

deploy/prereqs.sh   # cargo, a C++ compiler, libclang (installed with apt when missing)
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
echo "building ($PROFILE profile)..."
cargo build --profile "$PROFILE" -p diskless-coordinator -p diskless-broker-shim --bins
case "$PROFILE" in dev) dir=debug ;; *) dir=$PROFILE ;; esac
BIN=$CARGO_TARGET_DIR/$dir

mkdir -p "$DATA"
CTL=("$BIN/coordctl")
if [ "$TLS" = 1 ]; then
  CERTS=$DATA/certs
  # A CA (kept across runs), a certificate per node naming its host, the broker and the operator.
  [ -f "$CERTS/node-1.pem" ] || "$BIN/coordctl" certs --dir "$CERTS" \
    node-1:127.0.0.1,localhost node-2:127.0.0.1,localhost node-3:127.0.0.1,localhost broker-1 operator >/dev/null
  # The Kafka listener's certificate (same CA), and a SCRAM user for the SASL_SSL listener.
  [ -f "$CERTS/kafka.pem" ] || "$BIN/coordctl" certs --dir "$CERTS" kafka:127.0.0.1,localhost >/dev/null
  [ -f "$DATA/kafka-users.toml" ] || echo "$KAFKA_PASSWORD" |
    "$BIN/diskless-broker" scram-credential --file "$DATA/kafka-users.toml" --user demo >/dev/null
  CTL+=(--cacert "$CERTS/ca.pem" --cert "$CERTS/operator.pem" --key "$CERTS/operator.key")
fi
member_port() { if [ "$TLS" = 1 ]; then echo $((PEER_PORT + $1 - 1)); else echo $((BASE_PORT + $1 - 1)); fi; }
members=""
for i in 1 2 3; do members+="[[members]]"$'\n'"id = $i"$'\n'"addr = \"127.0.0.1:$(member_port $i)\""$'\n'; done
pids=()
stopped=0
stop() {
  [ "$stopped" = 1 ] && return
  stopped=1
  echo "stopping nodes..."
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}
trap stop INT TERM EXIT
for i in 1 2 3; do
  cat > "$DATA/node-$i.toml" <<TOML
node_id = $i
listen = "127.0.0.1:$((BASE_PORT + i - 1))"
data_dir = "$DATA/node-$i"
num_metadata_partitions = $GROUPS_N
metrics_addr = "127.0.0.1:$((METRICS_PORT + i - 1))"
$([ "$TLS" = 1 ] && echo "peer_listen = \"127.0.0.1:$(member_port $i)\"")

$members
TOML
  if [ "$TLS" = 1 ]; then
    files="cert = \"$CERTS/node-$i.pem\""$'\n'"key = \"$CERTS/node-$i.key\""$'\n'"ca = \"$CERTS/ca.pem\""
    cat >> "$DATA/node-$i.toml" <<TOML
[tls]
$files

[peer_tls]
$files

[roles]
admin = ["operator"]
broker = ["broker-1"]
TOML
  fi
  "$BIN/diskless-coordinator" --config "$DATA/node-$i.toml" >>"$DATA/node-$i.log" 2>&1 &
  pids+=($!)
done

echo "waiting for every metadata partition to elect a leader..."
"${CTL[@]}" --addr "127.0.0.1:$BASE_PORT" wait-ready --timeout-secs 120
"${CTL[@]}" --addr "127.0.0.1:$BASE_PORT" status

cat > "$DATA/broker.toml" <<TOML
broker_id = 1
listen = "127.0.0.1:$BROKER_PORT"
coordinators = ["127.0.0.1:$BASE_PORT", "127.0.0.1:$((BASE_PORT + 1))", "127.0.0.1:$((BASE_PORT + 2))"]
metrics_addr = "127.0.0.1:$((METRICS_PORT + 8))"

[storage]
kind = "local"
path = "$DATA/objects"

[kafka]
listen = "127.0.0.1:$KAFKA_PORT"
TOML
if [ "$TLS" = 1 ]; then
  cat >> "$DATA/broker.toml" <<TOML

[coordinator_tls]
cert = "$CERTS/broker-1.pem"
key = "$CERTS/broker-1.key"
ca = "$CERTS/ca.pem"

[[kafka.listeners]]
name = "SASL_SSL"
listen = "127.0.0.1:$KAFKA_SASL_PORT"
security_protocol = "SASL_SSL"

[kafka.tls]
cert = "$CERTS/kafka.pem"
key = "$CERTS/kafka.key"

[kafka.sasl]
credentials = "$DATA/kafka-users.toml"

# Authorization by ACLs (docs/security.md): the SCRAM user is the super user; others, and the
# PLAINTEXT listener's User:ANONYMOUS, may do what ACLs grant them.
[kafka.authorizer]
super_users = ["User:demo"]
TOML
fi
"$BIN/diskless-broker" --config "$DATA/broker.toml" >>"$DATA/broker.log" 2>&1 &
pids+=($!)
cat <<MSG

Coordinator quorum running: 127.0.0.1:$BASE_PORT, :$((BASE_PORT + 1)), :$((BASE_PORT + 2)) (data in $DATA).
Broker shim running: Kafka protocol on 127.0.0.1:$KAFKA_PORT, its own gRPC API on 127.0.0.1:$BROKER_PORT
  (WAL segments in $DATA/objects).
  status:    ${CTL[*]} --addr 127.0.0.1:$BASE_PORT status
  metrics:   curl -s 127.0.0.1:$METRICS_PORT/metrics (nodes :$METRICS_PORT-$((METRICS_PORT + 2)), broker :$((METRICS_PORT + 8)))
  kcat:      kcat -b 127.0.0.1:$KAFKA_PORT -L
$([ "$TLS" = 1 ] && echo "  SASL_SSL:  kcat -b 127.0.0.1:$KAFKA_SASL_PORT -X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-256 \\
               -X sasl.username=demo -X sasl.password=$KAFKA_PASSWORD -X ssl.ca.location=$CERTS/ca.pem -L
  ACLs:      demo is the super user; other users and the PLAINTEXT listener's User:ANONYMOUS get what
             ACLs grant (docs/security.md#authorization-acls)")
  demo:      $BIN/diskless-demo create --topic demo --partitions 4
             $BIN/diskless-demo produce --topic demo --partitions 4 --messages 1000
             $BIN/diskless-demo consume --topic demo --partition 0
  logs:      tail -f $DATA/node-*.log $DATA/broker.log
Ctrl-C to stop.
MSG
wait "${pids[@]}"
