#!/usr/bin/env bash
# Long fault runs: builds the suite, then runs the seeded nemesis against a local
# cluster for as long as asked and checks the history. A failing run keeps its history, every
# process's log and data, and the summary; `--seed N` replays a run.
#
#   tests/nemesis.sh --minutes 30 --nodes 5 [--brokers 2] [--groups 4] [--seed N] [--s3]
#                    [--faults kill-node,partition-nodes,...] [--keep] [--out DIR]
#   tests/nemesis.sh --check DIR/history.jsonl      # judge a saved history again
#
# Runs go under --out (default ./nemesis-runs): one folder per run (kept when it fails or with
# --keep) and one log per run with the summary; the exit status is 1 when anomalies were found.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/diskless-target}"

out=nemesis-runs
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --help|-h) sed -n '2,13p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"

cargo build --workspace --bins --quiet
log="$out/run-$(date +%Y%m%d-%H%M%S).log"
echo "nemesis: log $log"
# The run's folder (tempfile) is created under TMPDIR, so a kept run lands in --out.
set +e
TMPDIR="$out" "$CARGO_TARGET_DIR/debug/nemesis" "${args[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
exit "$status"
