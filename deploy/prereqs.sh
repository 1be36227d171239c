#!/usr/bin/env bash
# Checks what building (and, with --tests, testing) needs on a Debian or Ubuntu machine, and
# installs what is missing from the package registries (apt, PyPI). Safe to run again: every step
# is skipped when already done. Fails with a one-line explanation where it cannot help.
#
#   deploy/prereqs.sh           # build and run: cargo (Rust >= 1.89), a C++ compiler, libclang,
#                               # and kcat (the Kafka client README's quick start uses)
#   deploy/prereqs.sh --tests   # also what the tests use: PostgreSQL, moto, Kafka clients (pip; KafkaJS: npm),
#                               # the deployment files' validators (systemd-analyze,
#                               # kubernetes-validate, check-jsonschema)
#
# deploy/local/run.sh and tests/run.sh (the README's two commands) call it first.
set -euo pipefail

tests=0
for arg in "$@"; do
  case "$arg" in
    --tests) tests=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "prereqs: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

fail() { echo "prereqs: $*" >&2; exit 1; }

# Rust: rustup is the way to get it; we do not install a toolchain behind the user's back.
if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 ||
  fail "cargo is missing: install Rust 1.89 or newer with rustup (https://rustup.rs), then run this again"
rust_minor=$(rustc --version | sed -E 's/^rustc 1\.([0-9]+).*/\1/')
[ "${rust_minor:-0}" -ge 89 ] 2>/dev/null ||
  fail "$(rustc --version) is too old: Rust 1.89 or newer is needed (uuid 1.29 and crc-fast 1.10 in Cargo.lock need it) (rustup update stable)"

# System packages: a C++ compiler and libclang for RocksDB's build and bindings.
need=()
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
command -v kcat >/dev/null 2>&1 || need+=(kcat)          # a real Kafka client: the quick start, tests
if [ "$tests" = 1 ]; then
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)       # the benchmark's baseline
  command -v python3 >/dev/null 2>&1 || need+=(python3)
  python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
  command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)                 # verifies deploy/systemd units
  command -v node >/dev/null 2>&1 || need+=(nodejs)                             # KafkaJS, a third client
  command -v npm >/dev/null 2>&1 || need+=(npm)
fi
if [ ${#need[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 ||
    fail "missing ${need[*]} and there is no apt-get here: install them with your package manager"
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || fail "missing ${need[*]}: run as root or install sudo"
    sudo=(sudo)
  fi
  echo "prereqs: installing ${need[*]} (apt)"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ "$tests" = 1 ]; then
  # moto: a real S3 server for the S3 variants; confluent-kafka, kafka-python and aiokafka: three
  # independent Kafka client implementations.
  pip_install() {
    # Debian's system Python refuses user installs without this flag (PEP 668).
    python3 -m pip install -q "$@" 2>/dev/null ||
      python3 -m pip install -q --break-system-packages "$@" ||
      fail "pip could not install $*"
    if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
  }
  if ! command -v moto_server >/dev/null 2>&1; then
    echo "prereqs: installing moto[server] (pip)"
    pip_install 'moto[server]'
    export PATH="$HOME/.local/bin:$PATH"
  fi
  command -v moto_server >/dev/null 2>&1 || fail "moto_server is not on PATH after installing moto (add ~/.local/bin to PATH)"
  if ! python3 -c 'import confluent_kafka, kafka, aiokafka' 2>/dev/null; then
    echo "prereqs: installing confluent-kafka, kafka-python and aiokafka (pip)"
    pip_install --only-binary :all: confluent-kafka kafka-python aiokafka
  fi
  # PyYAML: the metrics test checks deploy/prometheus/alerts.yml parses.
  python3 -c 'import yaml' 2>/dev/null || pip_install pyyaml
  # t84_deploy_files: Kubernetes manifests and the compose file against their schemas (both carry
  # the schemas, so the check works offline).
  if ! command -v kubernetes-validate >/dev/null 2>&1 || ! command -v check-jsonschema >/dev/null 2>&1; then
    echo "prereqs: installing kubernetes-validate and check-jsonschema (pip)"
    pip_install kubernetes-validate check-jsonschema
    export PATH="$HOME/.local/bin:$PATH"
  fi
  command -v kubernetes-validate >/dev/null 2>&1 && command -v check-jsonschema >/dev/null 2>&1 ||
    fail "kubernetes-validate or check-jsonschema is not on PATH after installing them (add ~/.local/bin to PATH)"
  # KafkaJS (npm), at the version tests/node/package-lock.json pins, into tests/node/node_modules.
  node_dir="$(cd "$(dirname "$0")/../tests/node" && pwd)"
  if ! node -e "require('$node_dir/node_modules/kafkajs')" >/dev/null 2>&1; then
    echo "prereqs: installing KafkaJS (npm ci in tests/node)"
    npm ci --prefix "$node_dir" --no-audit --no-fund --loglevel=error >/dev/null ||
      fail "npm could not install KafkaJS into $node_dir"
  fi
fi
echo "prereqs: ok"
