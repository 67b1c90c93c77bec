#!/usr/bin/env bash
# mcpgw's test command: everything CI checks, in order, failing on the first
# failed stage.
#
#   scripts/test.sh           every stage below; about 25 minutes on 2 cores with a warm
#                             build cache (CI: 24.4 min), most of it the bench build (10 min),
#                             the tests (7 min) and fuzzing (7 min)
#   scripts/test.sh --quick   stages 0-4c and 7: format, lint, unit and end-to-end tests, the
#                             leftover-process check and the install; no doc tests, benches,
#                             conformance or fuzzing. About 10 minutes warm.
#
#   0. cargo-nextest, installed from crates.io when missing (once, about 3 minutes)
#   1. scripts/setup-test-env.sh   real MCP peers into .peers/ (idempotent)
#      scripts/fetch-models.sh     embedding models into ~/.cache/mcpgw/models (idempotent)
#      scripts/test-postgres.sh start   the PostgreSQL the store's tests also run against
#      (a throwaway cluster in .peers/postgres on a free loopback port, about 1 s; stopped
#      again when this script exits, unless it was already running)
#      scripts/test-redis.sh start      the Redis the replica tests share live state through
#      (a throwaway redis-server in .peers/redis on a free loopback port, no persistence;
#      stopped again when this script exits, unless it was already running)
#   2. cargo fmt --all --check
#   3. cargo clippy --workspace --all-targets -- -D warnings
#   4. cargo nextest run --workspace --no-fail-fast
#   4b. no process the tests started is still running (see `leftover_processes`)
#   4c. cargo install --locked --path crates/cli --debug into a temporary root, then
#      `mcpgw --version` from there: the README's install command works (see the stage)
#   5. cargo test --workspace --doc
#   6. cargo bench --workspace --no-run        (benches must keep compiling)
#   6b. scripts/conformance-client.sh           the official suite's client scenarios
#      against mcpgw's upstream client (expected failures: tests/conformance/)
#   6c. scripts/conformance-server.sh           the suite's server scenarios, both eras,
#      against `mcpgw serve` in front of the fixture upstream (tests/conformance/)
#   6d. again: no process the conformance runs started is still running
#   7. architecture invariants (cargo tree): retrieval has no tokio; catalog has
#      no tokio and no rmcp; config has no rmcp; catalog and retrieval have no candle;
#      netguard without its client feature has no tokio; upstream has no axum and no
#      sqlx; store has no rmcp and no axum; cluster has no rmcp, axum or sqlx (normal
#      dependencies); only gateway and cli
#      name anyhow among their own dependencies.
#   8. scripts/fuzz.sh 60                       each cargo-fuzz target for 60 s (fuzz/)
#
# Works from any directory. Honours CARGO_TARGET_DIR.
# Env: MCPGW_SKIP_SETUP=1 skips stage 1 (when the peers are known to be there).
#      MCPGW_FUZZ_SECONDS sets stage 8's time per target (default 60; 0 skips it).
set -euo pipefail

QUICK=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "usage: scripts/test.sh [--quick]" >&2
      exit 2
      ;;
  esac
done

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
T0=$SECONDS
if [[ $QUICK == 1 ]]; then
  echo "==> [test] quick run: format, lint, unit and end-to-end tests; about 10 minutes on 2 cores with a warm build cache"
else
  echo "==> [test] full run: about 25 minutes on 2 cores with a warm build cache (scripts/test.sh --quick: about 10)"
fi

STAGE=""
NEXTEST_LOG=""
stage() {
  STAGE="$*"
  printf '\n==> [test] %s\n' "$STAGE"
}
POSTGRES_STARTED=0
REDIS_STARTED=0
on_exit() {
  local rc=$?
  [[ -n "$NEXTEST_LOG" ]] && rm -f "$NEXTEST_LOG"
  if [[ $POSTGRES_STARTED == 1 ]]; then
    bash "$REPO/scripts/test-postgres.sh" stop || true
  fi
  if [[ $REDIS_STARTED == 1 ]]; then
    bash "$REPO/scripts/test-redis.sh" stop || true
  fi
  if [[ $rc -ne 0 ]]; then
    printf '\n==> [test] FAILED at stage: %s (exit %d)\n' "${STAGE:-startup}" "$rc" >&2
  fi
}
trap on_exit EXIT

# ---- 0. cargo-nextest ----------------------------------------------------------
if ! cargo nextest --version >/dev/null 2>&1; then
  stage "cargo-nextest is missing: installing it (cargo install cargo-nextest --locked, about 3 minutes, once)"
  cargo install cargo-nextest --locked
fi

# ---- leftover processes -----------------------------------------------------------
# Every process the tests start carries this tag in its environment: the harness and the
# Python client driver pass their environment on, and mcpgw passes its own to its stdio
# upstreams. A tagged process that is no longer a descendant of this script was left behind
# (its parent died and it was re-parented): a test killed something without its children.
export MCPGW_TEST_RUN="mcpgw-test-$$-$(date +%s)"

# The pids of tagged processes outside this script's own process tree.
leftover_processes() {
  local dir pid ancestor
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    # -z: the entries of /proc/PID/environ end in NUL bytes.
    grep -qzxF -- "MCPGW_TEST_RUN=$MCPGW_TEST_RUN" "$dir/environ" 2>/dev/null || continue
    ancestor=$pid
    while [[ -n "$ancestor" && "$ancestor" != 0 && "$ancestor" != 1 ]]; do
      [[ "$ancestor" == "$$" ]] && continue 2
      ancestor="$(awk '/^PPid:/ { print $2 }' "/proc/$ancestor/status" 2>/dev/null)"
    done
    echo "$pid"
  done
}

# Fails when a tagged process is still running 10 s after the stage that started it ended
# (a process killed at the very end of a test may take a moment to go), and ends them.
check_leftover_processes() {
  local left=() deadline=$((SECONDS + 10))
  while :; do
    mapfile -t left < <(leftover_processes)
    [[ ${#left[@]} -eq 0 ]] && { echo "    ok: no process started by the tests is still running"; return 0; }
    (( SECONDS >= deadline )) && break
    sleep 0.5
  done
  echo "    FAIL: ${#left[@]} process(es) started by the tests are still running:" >&2
  ps -o pid=,ppid=,etime=,args= -p "$(IFS=,; echo "${left[*]}")" | sed 's/^/      /' >&2 || true
  kill -KILL -- "${left[@]}" 2>/dev/null || true
  echo "    (ended them; find the test that started them by the command line above)" >&2
  return 1
}

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

# ---- 1c. PostgreSQL ------------------------------------------------------------
# Started even with MCPGW_SKIP_SETUP (it is a server, not an install); the package itself is
# installed by .ci/run (apt-get install postgresql-15) or by hand.
stage "test PostgreSQL (scripts/test-postgres.sh start)"
if ! bash "$REPO/scripts/test-postgres.sh" status; then
  POSTGRES_STARTED=1
fi
pg_out="$(bash "$REPO/scripts/test-postgres.sh" start)"
if [[ "$pg_out" =~ MCPGW_TEST_POSTGRES_URL=([^[:space:]]+) ]]; then
  export MCPGW_TEST_POSTGRES_URL="${BASH_REMATCH[1]}"
  echo "    MCPGW_TEST_POSTGRES_URL=$MCPGW_TEST_POSTGRES_URL"
else
  echo "    FAIL: scripts/test-postgres.sh start printed no URL" >&2
  exit 1
fi

# ---- 1d. Redis -----------------------------------------------------------------
# Like PostgreSQL: started here, the package installed by .ci/run (apt-get install
# redis-server) or by hand.
stage "test Redis (scripts/test-redis.sh start)"
if ! bash "$REPO/scripts/test-redis.sh" status; then
  REDIS_STARTED=1
fi
redis_out="$(bash "$REPO/scripts/test-redis.sh" start)"
if [[ "$redis_out" =~ MCPGW_TEST_REDIS_URL=([^[:space:]]+) ]]; then
  export MCPGW_TEST_REDIS_URL="${BASH_REMATCH[1]}"
  echo "    MCPGW_TEST_REDIS_URL=$MCPGW_TEST_REDIS_URL"
else
  echo "    FAIL: scripts/test-redis.sh start printed no URL" >&2
  exit 1
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

stage "no process started by the tests is still running"
check_leftover_processes

# ---- 4c. install ------------------------------------------------------------------
# The README's install command, `cargo install --locked --path crates/cli`, into a temporary
# root. With --debug and this run's target directory it reuses the dependencies the test build
# compiled and builds the cli crate again (about a minute on 2 cores: the workspace test build
# compiled it with its dev-dependencies' features), not the 15 minutes of a release build with
# LTO; a release install here would double the run for little more proof. What it proves: the
# crate installs from the lock file as it is (--locked), the binary target is the one the
# README names, and the installed binary runs. What it does not: that the release profile (LTO,
# stripping) builds; `cargo build --release` shows that, and the benches build with most of it.
stage "cargo install --locked --path crates/cli --debug (into a temporary root)"
INSTALL_ROOT="$(mktemp -d)"
# Without a target directory cargo install builds in a temporary one, from nothing.
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}" \
  cargo install --locked --path crates/cli --debug --root "$INSTALL_ROOT" --quiet
installed_version="$("$INSTALL_ROOT/bin/mcpgw" --version)"
rm -rf "$INSTALL_ROOT"
echo "    ok: $installed_version"
if [[ "$installed_version" != "mcpgw "* ]]; then
  echo "    FAIL: the installed binary printed '$installed_version'" >&2
  exit 1
fi

if [[ $QUICK != 1 ]]; then
stage "cargo test --workspace --doc"
cargo test --workspace --doc

stage "cargo bench --workspace --no-run"
cargo bench --workspace --no-run

stage "conformance: client scenarios (scripts/conformance-client.sh)"
scripts/conformance-client.sh

stage "conformance: server scenarios (scripts/conformance-server.sh)"
scripts/conformance-server.sh

stage "no process started by the conformance runs is still running"
check_leftover_processes
fi

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
# The replicas' Redis link knows no MCP, no HTTP server and no database.
assert_no_dep mcpgw-cluster rmcp || invariants_ok=0
assert_no_dep mcpgw-cluster axum || invariants_ok=0
assert_no_dep mcpgw-cluster sqlx || invariants_ok=0
# Libraries return typed errors: anyhow belongs to the two crates at the top, gateway and cli.
for lib in mcpgw-catalog mcpgw-cluster mcpgw-config mcpgw-embed mcpgw-eval mcpgw-netguard mcpgw-retrieval \
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
if [[ $QUICK != 1 && "${MCPGW_FUZZ_SECONDS:-60}" != 0 ]]; then
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
