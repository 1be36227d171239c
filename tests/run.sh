#!/usr/bin/env bash
# The test command (README: "Run the tests"): checks and installs the prerequisites, then runs
# every test of the workspace, the short fault-suite run and the smoke benchmark included.
# Extra arguments go to `cargo test` (e.g. `tests/run.sh --test cluster t20_leader_crash::`).
#
# Builds go to $CARGO_TARGET_DIR (default ~/.cache/diskless-target), outside the clone, so
# RocksDB's C++ is compiled once per machine. Tests that need a tool (moto_server, kcat, the
# Python Kafka clients, PostgreSQL) fail here when it is missing, rather than skip.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/prereqs.sh --tests
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
[ -d "$HOME/.local/bin" ] && export PATH="$HOME/.local/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/diskless-target}"
export DISKLESS_CI=1
# --no-fail-fast: every test binary runs even when one fails; cargo lists the failed ones at the end.
exec cargo test --workspace --locked --no-fail-fast "$@"
