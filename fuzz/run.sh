#!/usr/bin/env bash
# Runs the coverage-guided fuzz targets (cargo-fuzz, libFuzzer, AddressSanitizer), each for a
# while, from the committed seeds plus the corpus earlier runs on this machine grew. A crash, a
# leak, an input that runs out of the memory limit or a timeout fails the run; its input is kept
# in the artifacts folder (printed) and can be replayed with
# `cargo +nightly fuzz run TARGET --fuzz-dir fuzz ARTIFACT`.
#
#   fuzz/run.sh                    # every target, 60 s each (what CI runs)
#   fuzz/run.sh 3600               # every target for an hour each
#   fuzz/run.sh 600 record_batch   # some targets
#   fuzz/run.sh --seeds            # (re)write fuzz/seeds/ from the crates' fuzz_targets::seeds()
#
# Needs a nightly toolchain (rustup toolchain install nightly); without one it says so and stops
# with success, so the default test command never needs nightly. Installs cargo-fuzz when missing.
# Builds go to $FUZZ_TARGET_DIR (default ~/.cache/diskless-fuzz-target: RocksDB's C++ is built
# once per machine there too); the grown corpus to $FUZZ_CORPUS_DIR (~/.cache/diskless-fuzz-corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

TARGETS=(kafka_request record_batch records_in_batch wal_segment seglog_records peer_message commit_file)
CARGO_FUZZ_VERSION=0.13.2
export CARGO_TERM_COLOR=never
FUZZ_TARGET_DIR=${FUZZ_TARGET_DIR:-$HOME/.cache/diskless-fuzz-target}
FUZZ_CORPUS_DIR=${FUZZ_CORPUS_DIR:-$HOME/.cache/diskless-fuzz-corpus}
ARTIFACTS=${FUZZ_ARTIFACTS:-$FUZZ_CORPUS_DIR/artifacts}

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: skipped: no nightly toolchain (rustup toolchain install nightly), which cargo-fuzz needs"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION"
  # Built with the default toolchain: its locked dependencies do not all build on nightly.
  cargo install --quiet --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

if [ "${1:-}" = "--seeds" ]; then
  rm -rf fuzz/seeds
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/diskless-target}" \
    cargo run --quiet --locked -p diskless-cluster-tests --bin fuzz-seeds
  exit 0
fi

seconds=${1:-60}
shift || true
[ $# -gt 0 ] && TARGETS=("$@")

# RocksDB's C++ is not what is fuzzed: link the library the test build already compiled (the same
# librocksdb-sys version) rather than compiling it again under the fuzzing flags (~15 minutes).
lock_version() { grep -A1 '^name = "librocksdb-sys"$' "$1" | sed -n 's/^version = "\(.*\)"$/\1/p'; }
if [ -z "${ROCKSDB_LIB_DIR:-}" ] && [ "$(lock_version Cargo.lock)" = "$(lock_version fuzz/Cargo.lock)" ]; then
  lib=$(ls -t "${CARGO_TARGET_DIR:-$HOME/.cache/diskless-target}"/debug/build/librocksdb-sys-*/out/librocksdb.a \
    2>/dev/null | head -1 || true)
  if [ -n "$lib" ]; then
    export ROCKSDB_LIB_DIR; ROCKSDB_LIB_DIR=$(dirname "$lib")
    export ROCKSDB_STATIC=1
    echo "fuzz: linking the test build's RocksDB ($ROCKSDB_LIB_DIR)"
  fi
fi
echo "fuzz: building (the first time on a machine, without a test build's RocksDB: its C++ too, about 15 minutes)"
mkdir -p "$ARTIFACTS"
if ! cargo +nightly fuzz build --fuzz-dir fuzz --target-dir "$FUZZ_TARGET_DIR" -O --debug-assertions \
    >"$FUZZ_CORPUS_DIR/build.log" 2>&1; then
  tail -40 "$FUZZ_CORPUS_DIR/build.log"
  echo "fuzz: the build failed (log $FUZZ_CORPUS_DIR/build.log)"
  exit 1
fi
failed=()
for t in "${TARGETS[@]}"; do
  corpus=$FUZZ_CORPUS_DIR/$t
  mkdir -p "$corpus"
  log=$FUZZ_CORPUS_DIR/$t.log
  # The grown corpus first (new inputs are written there), then the committed seeds.
  if cargo +nightly fuzz run --fuzz-dir fuzz --target-dir "$FUZZ_TARGET_DIR" -O --debug-assertions "$t" \
      "$corpus" "fuzz/seeds/$t" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 -max_len=65536 \
      -artifact_prefix="$ARTIFACTS/$t-" -print_final_stats=1 >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz: $t: ${runs:-?} executions in ${seconds} s, $cov, corpus $(ls "$corpus" | wc -l) inputs: no crash"
  else
    echo "fuzz: $t FAILED (log $log):"
    grep -E 'ERROR|panicked|SUMMARY|Test unit written|artifact' "$log" | head -20 || tail -30 "$log"
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in ${failed[*]} (inputs in $ARTIFACTS)"
  exit 1
fi
