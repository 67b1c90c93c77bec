#!/usr/bin/env bash
# mcpgw's test command: everything CI checks, in order, failing on the first
# failed stage.
#
#   1. scripts/setup-test-env.sh   real MCP peers into .peers/ (idempotent)
#      scripts/fetch-models.sh     embedding models into ~/.cache/mcpgw/models (idempotent)
#   2. cargo fmt --all --check
#   3. cargo clippy --workspace --all-targets -- -D warnings
#   4. cargo nextest run --workspace --no-fail-fast
#   5. cargo test --workspace --doc
#   6. cargo bench --workspace --no-run        (benches must keep compiling)
#   6b. scripts/conformance-client.sh           the official suite's client scenarios
#      against mcpgw's upstream client (expected failures: tests/conformance/)
#   6c. scripts/conformance-server.sh           the suite's server scenarios, both eras,
#      against `mcpgw serve` in front of the fixture upstream (tests/conformance/)
#   7. architecture invariants (cargo tree): retrieval has no tokio; catalog has
#      no tokio and no rmcp; config has no rmcp; catalog and retrieval have no candle;
#      netguard without its client feature has no tokio; upstream has no axum and no
#      sqlx; store has no rmcp and no axum (normal dependencies); only gateway and cli
#      name anyhow among their own dependencies.
#   8. scripts/fuzz.sh 60                       each cargo-fuzz target for 60 s (fuzz/)
#
# Works from any directory. Honours CARGO_TARGET_DIR.
# Env: MCPGW_SKIP_SETUP=1 skips stage 1 (when the peers are known to be there).
#      MCPGW_FUZZ_SECONDS sets stage 8's time per target (default 60; 0 skips it).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
T0=$SECONDS

STAGE=""
NEXTEST_LOG=""
stage() {
  STAGE="$*"
  printf '\n==> [test] %s\n' "$STAGE"
}
on_exit() {
  local rc=$?
  [[ -n "$NEXTEST_LOG" ]] && rm -f "$NEXTEST_LOG"
  if [[ $rc -ne 0 ]]; then
    printf '\n==> [test] FAILED at stage: %s (exit %d)\n' "${STAGE:-startup}" "$rc" >&2
  fi
}
trap on_exit EXIT

# ---- 1. peers ---------------------------------------------------------------
if [[ "${MCPGW_SKIP_SETUP:-}" != 1 ]]; then
  stage "setup test environment (scripts/setup-test-env.sh)"
  env_out="$(bash "$REPO/scripts/setup-test-env.sh")"
  # Export the MCPGW_* lines it prints (MCPGW_PEERS, MCPGW_NODE22).
  while IFS= read -r line; do
    if [[ "$line" =~ ^(MCPGW_[A-Z0-9_]+)=(.*)$ ]]; then
      export "${BASH_REMATCH[1]}=${BASH_REMATCH[2]}"
      printf '    %s\n' "$line"
    fi
  done <<<"$env_out"
fi

# ---- 1b. embedding models ------------------------------------------------------
if [[ "${MCPGW_SKIP_SETUP:-}" != 1 ]]; then
  stage "embedding models (scripts/fetch-models.sh)"
  bash "$REPO/scripts/fetch-models.sh"
fi

# ---- 2-6. cargo ---------------------------------------------------------------
stage "cargo fmt --all --check"
cargo fmt --all --check

stage "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

stage "cargo nextest run --workspace --no-fail-fast"
NEXTEST_LOG="$(mktemp)"
cargo nextest run --workspace --no-fail-fast 2>&1 | tee "$NEXTEST_LOG"
NEXTEST_SUMMARY="$(grep -E '^[[:space:]]*Summary \[' "$NEXTEST_LOG" | tail -n 1 || true)"

stage "cargo test --workspace --doc"
cargo test --workspace --doc

stage "cargo bench --workspace --no-run"
cargo bench --workspace --no-run

stage "conformance: client scenarios (scripts/conformance-client.sh)"
scripts/conformance-client.sh

stage "conformance: server scenarios (scripts/conformance-server.sh)"
scripts/conformance-server.sh

# ---- 7. architecture invariants --------------------------------------------
# assert_no_dep PKG DEP [CARGO-TREE-ARGS...]: DEP must not be a normal (non-dev,
# non-build) dependency of workspace package PKG, directly or transitively (with
# the extra arguments, such as --no-default-features, given to every cargo tree).
#
# `cargo tree -i DEP -p PKG -e normal` exits 101 with "did not match any
# packages" when DEP is not in PKG's graph at all, exits 0 with "nothing to
# print" when DEP is only reachable through other edge kinds, exits 0 and
# prints the inverted path when DEP IS a dependency, and errors with "is
# ambiguous" when several versions of DEP are in the graph. A forward listing
# of PKG's dependencies cross-checks every verdict.
assert_no_dep() {
  local pkg=$1 dep=$2 out rc forward
  shift 2
  local extra=("$@")
  if ! out="$(cargo pkgid "$pkg" 2>&1)"; then
    echo "    FAIL: cannot resolve workspace package '$pkg' (renamed? then update this check):" >&2
    printf '%s\n' "$out" | sed 's/^/      /' >&2
    return 1
  fi
  # Forward listing: every package in PKG's normal dependency graph.
  if ! forward="$(cargo tree -p "$pkg" "${extra[@]}" -e normal --prefix none -f '{p}' 2>&1)"; then
    echo "    FAIL: cargo tree -p $pkg failed:" >&2
    printf '%s\n' "$forward" >&2
    return 1
  fi
  rc=0
  out="$(cargo tree -i "$dep" -p "$pkg" "${extra[@]}" -e normal 2>&1)" || rc=$?
  if [[ $rc -eq 0 ]] && grep -qE "^$dep v[0-9]" <<<"$out"; then
    echo "    FAIL: $pkg depends on $dep:" >&2
    printf '%s\n' "$out" | sed 's/^/      /' >&2
    return 1
  elif [[ $rc -eq 0 ]]; then
    : # "nothing to print": not a normal dependency
  elif grep -q "\`$dep\` did not match any packages" <<<"$out"; then
    : # not in the graph at all
  elif grep -q "is ambiguous" <<<"$out"; then
    : # several versions in the graph: the forward listing below decides
  else
    echo "    FAIL: unexpected cargo tree error (exit $rc) for $pkg -> $dep:" >&2
    printf '%s\n' "$out" >&2
    return 1
  fi
  if grep -qE "^$dep v[0-9]" <<<"$forward"; then
    echo "    FAIL: $pkg depends on $dep (forward listing):" >&2
    cargo tree -p "$pkg" "${extra[@]}" -e normal -i "$dep" 2>&1 | sed 's/^/      /' >&2 || true
    return 1
  fi
  echo "    ok: $pkg${extra[*]:+ (${extra[*]})} does not depend on $dep"
}

# assert_no_direct_dep PKG DEP: DEP is not one of PKG's own normal dependencies (it may
# still arrive through another crate, as anyhow does through tiktoken-rs).
assert_no_direct_dep() {
  local pkg=$1 dep=$2 direct
  if ! direct="$(cargo tree -p "$pkg" -e normal --depth 1 --prefix none -f '{p}' 2>&1)"; then
    echo "    FAIL: cargo tree -p $pkg failed:" >&2
    printf '%s\n' "$direct" >&2
    return 1
  fi
  if grep -qE "^$dep v[0-9]" <<<"$direct"; then
    echo "    FAIL: $pkg names $dep in its own [dependencies]" >&2
    return 1
  fi
  echo "    ok: $pkg does not name $dep itself"
}

stage "architecture invariants (cargo tree -e normal)"
invariants_ok=1
assert_no_dep mcpgw-retrieval tokio || invariants_ok=0
assert_no_dep mcpgw-catalog tokio || invariants_ok=0
assert_no_dep mcpgw-catalog rmcp || invariants_ok=0
assert_no_dep mcpgw-config rmcp || invariants_ok=0
# Heavy model code stays in embed: the catalog and retrieval never compile candle.
assert_no_dep mcpgw-catalog candle-core || invariants_ok=0
assert_no_dep mcpgw-retrieval candle-core || invariants_ok=0
# config validates [network] allow with netguard's rules alone: no HTTP stack, no runtime.
assert_no_dep mcpgw-netguard tokio --no-default-features || invariants_ok=0
# The upstream client holds no server and no database; the store speaks no MCP and no HTTP.
assert_no_dep mcpgw-upstream axum || invariants_ok=0
assert_no_dep mcpgw-upstream sqlx || invariants_ok=0
assert_no_dep mcpgw-store rmcp || invariants_ok=0
assert_no_dep mcpgw-store axum || invariants_ok=0
# Libraries return typed errors: anyhow belongs to the two crates at the top, gateway and cli.
for lib in mcpgw-catalog mcpgw-config mcpgw-embed mcpgw-eval mcpgw-netguard mcpgw-retrieval \
  mcpgw-store mcpgw-upstream; do
  assert_no_direct_dep "$lib" anyhow || invariants_ok=0
done
if [[ $invariants_ok -ne 1 ]]; then
  echo "    architecture invariants violated" >&2
  exit 1
fi

# ---- 8. fuzzing ----------------------------------------------------------------
# Last: its instrumented build is the slowest step of a cold run, and it uses its own
# target dir (see the script).
if [[ "${MCPGW_FUZZ_SECONDS:-60}" != 0 ]]; then
  stage "fuzz (scripts/fuzz.sh ${MCPGW_FUZZ_SECONDS:-60})"
  scripts/fuzz.sh "${MCPGW_FUZZ_SECONDS:-60}"
fi

STAGE="done"
printf '\n==> [test] all stages passed in %d s\n' "$((SECONDS - T0))"
# Repeat nextest's counts as the closing line (the doc-test and bench stages
# print their own runner lines after nextest's summary).
if [[ "$NEXTEST_SUMMARY" =~ ([0-9]+)\ passed ]]; then
  passed="${BASH_REMATCH[1]}"
  failed=0
  skipped=0
  [[ "$NEXTEST_SUMMARY" =~ ([0-9]+)\ failed ]] && failed="${BASH_REMATCH[1]}"
  [[ "$NEXTEST_SUMMARY" =~ ([0-9]+)\ skipped ]] && skipped="${BASH_REMATCH[1]}"
  printf 'nextest: %s passed, %s failed, %s skipped\n' "$passed" "$failed" "$skipped"
else
  echo "nextest: no test summary found (no tests ran)"
fi
