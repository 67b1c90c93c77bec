#!/usr/bin/env bash
# Builds the cargo-fuzz targets in fuzz/ and runs each for a bounded time; fails when one
# crashes (a panic, a 5xx, a hang past the per-input timeout) and prints its executions per
# second.
#
#   scripts/fuzz.sh [SECONDS [TARGET...]]   SECONDS per target (default 60), every target by
#                                           default; the targets run side by side, one core each
#
# Runs on the stable toolchain: with `--sanitizer none` cargo-fuzz passes rustc only stable
# `-C` flags (the SanitizerCoverage pass that libFuzzer's feedback needs), and without
# `--build-std` no `-Z` flag. The price is no AddressSanitizer, which safe Rust does not need
# to catch what these targets look for.
#
# cargo-fuzz is installed once into $MCPGW_CACHE/tools (kept between CI runs, like the main
# target dir); the instrumented build goes to its own target dir, $MCPGW_CACHE/fuzz-target,
# so it never invalidates the main build. The corpus each run grows is fuzz/corpus/TARGET
# (git-ignored; the committed starting inputs are fuzz/seeds/TARGET); a crashing input is
# written to fuzz/artifacts/TARGET/ and printed in base64.
#
# Env: MCPGW_CACHE (default ~/.cache/mcpgw); MCPGW_FUZZ_ARGS, extra libFuzzer flags
# (e.g. "-fork=4" for four fuzzing processes per target).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

SECONDS_PER_TARGET="${1:-60}"
shift || true
if ! [[ "$SECONDS_PER_TARGET" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS [TARGET...]]" >&2
  exit 2
fi
TARGETS=("$@")
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  for file in fuzz/fuzz_targets/*.rs; do
    TARGETS+=("$(basename "$file" .rs)")
  done
fi

CARGO_FUZZ_VERSION=0.13.2
CACHE="${MCPGW_CACHE:-$HOME/.cache/mcpgw}"
TOOLS="$CACHE/tools"
export PATH="$TOOLS/bin:$PATH"
# Not the main build's CARGO_TARGET_DIR: instrumented artefacts would evict its own.
export CARGO_TARGET_DIR="$CACHE/fuzz-target"
export RUST_BACKTRACE=1

say() { printf '==> [fuzz] %s\n' "$*"; }

if [[ "$(cargo-fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
  say "installing cargo-fuzz $CARGO_FUZZ_VERSION into $TOOLS"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --root "$TOOLS"
fi

# The fuzz workspace builds the versions the main workspace locks and tests: its lock
# (git-ignored) starts as a copy of the root one, to which cargo adds libFuzzer's crates.
cp Cargo.lock fuzz/Cargo.lock

# The fuzz crate is outside the main workspace, so `cargo fmt --all` does not see it.
cargo fmt --manifest-path fuzz/Cargo.toml --check

say "building ${TARGETS[*]} ($(rustc --version), target dir $CARGO_TARGET_DIR)"
t0=$SECONDS
for target in "${TARGETS[@]}"; do
  cargo fuzz build --sanitizer none "$target"
done
say "built in $((SECONDS - t0)) s"

LOGS="$(mktemp -d)"
trap 'rm -rf "$LOGS"' EXIT

# run TARGET: fuzzes TARGET for SECONDS_PER_TARGET, output into $LOGS/TARGET.log.
run() {
  local target=$1 dict="fuzz/dicts/$1.dict" args=()
  mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
  [[ -f "$dict" ]] && args+=("-dict=$dict")
  # -timeout: an input that takes this long is a hang (each takes milliseconds).
  # shellcheck disable=SC2086 # MCPGW_FUZZ_ARGS is a list of flags
  cargo fuzz run --sanitizer none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 "${args[@]}" ${MCPGW_FUZZ_ARGS:-} \
    >"$LOGS/$target.log" 2>&1
}

say "running each target for $SECONDS_PER_TARGET s"
touch "$LOGS/start"
declare -A PIDS
for target in "${TARGETS[@]}"; do
  run "$target" &
  PIDS[$target]=$!
done

failed=()
for target in "${TARGETS[@]}"; do
  rc=0
  wait "${PIDS[$target]}" || rc=$?
  log="$LOGS/$target.log"
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)"
  if [[ -z "$runs" ]]; then
    # -fork prints no final stats: take its last status line (`#RUNS: ... exec/s: N ...`).
    status="$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)"
    runs="$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$status")"
    rate="$(sed -nE 's/.*exec\/s:? ([0-9]+).*/\1/p' <<<"$status")"
  fi
  corpus="$(find "fuzz/corpus/$target" -type f | wc -l)"
  if [[ $rc -eq 0 ]]; then
    say "$target: ok, ${runs:-?} runs in $SECONDS_PER_TARGET s, ${rate:-?} exec/s, corpus $corpus inputs"
    continue
  fi
  failed+=("$target")
  say "$target: FAILED (exit $rc) after ${runs:-?} runs, ${rate:-?} exec/s; libFuzzer's output:" >&2
  # From the panic (or libFuzzer's own report: timeout, out of memory) on, else the end.
  first="$(grep -n -m 1 -E "panicked at|ERROR: libFuzzer" "$log" | cut -d: -f1)"
  if [[ -n "$first" ]]; then
    tail -n "+$first" "$log" | head -n 300 >&2
  else
    tail -n 80 "$log" >&2
  fi
  # Only this run's artifacts: older ones stay for whoever is reproducing them.
  find "fuzz/artifacts/$target" -type f -newer "$LOGS/start" | while read -r artifact; do
    say "$artifact ($(wc -c <"$artifact") bytes), base64:" >&2
    head -c 65536 "$artifact" | base64 >&2
    say "reproduce: PATH=\"$TOOLS/bin:\$PATH\" CARGO_TARGET_DIR=$CARGO_TARGET_DIR cargo fuzz run --sanitizer none $target $artifact" >&2
  done
done

if [[ ${#failed[@]} -gt 0 ]]; then
  say "failed: ${failed[*]}" >&2
  exit 1
fi
