#!/usr/bin/env bash
# Measures mcpgw's memory and start-up time with one upstream server exposing many tools
# (tests/fixtures/many_tools_server.py), in three runs, and its memory under load in a fourth:
#
#   1. cold    hybrid search, default local model (all-MiniLM-L6-v2), empty store: every tool
#              is embedded at start-up
#   2. warm    same store again: embeddings come from the cache
#   3. bm25    [retrieval] strategy = "bm25": no model loaded at all
#   4. load    not the many-tools server but server-everything over stdio, passthrough, BM25:
#              RSS idle, then right after and MEASURE_SETTLE_S after MEASURE_LOAD_SESSIONS
#              Streamable HTTP sessions (all at once), each making MEASURE_LOAD_CALLS
#              `tools/call echo` on one keep-alive connection and then closing with DELETE.
#              The issue 11 target is RSS after load <= 1.2x idle. Not in the default runs.
#
# Each run starts `mcpgw serve` on a free loopback port in its own process group, waits until
# search is complete (the log's "search vectors ready" for a non-empty catalog, or "server ready" for bm25), reads VmRSS / VmHWM (peak) from /proc for the gateway and, labelled
# separately, the upstream Python child, makes one search_tools call over Streamable HTTP and
# reads the gateway's memory again, then stops the gateway with SIGTERM to its process group.
#
# Usage: scripts/measure-memory.sh [N_TOOLS]          (default 10000)
# Env:   MEASURE_READY_TIMEOUT_S   wait for readiness per run (default 1200)
#        MEASURE_BUILD=1           run `cargo build --release --bin mcpgw` even if the binary exists
#        MEASURE_RUNS="bm25"       which runs, in order (default "cold warm bm25"; warm needs cold first;
#                                  "load" ignores N_TOOLS)
#        MEASURE_LOAD_SESSIONS, MEASURE_LOAD_CALLS   the load run's size (default 100 and 100)
#        MEASURE_SETTLE_S          the load run's wait before its last reading (default 5)
#        MEASURE_KEEP=1            keep the temp dir (configs, logs, store) and print its path
# Needs: .peers/venv (scripts/setup-test-env.sh), the model (scripts/fetch-models.sh), curl;
# the load run needs server-everything under .peers/node_modules (setup-test-env.sh) and node.
# Linux only (/proc). The binary is copied into the temp dir so a rebuild during the
# measurement cannot change it between runs.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-10000}"
TIMEOUT_S="${MEASURE_READY_TIMEOUT_S:-1200}"
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
PY="$REPO/.peers/venv/bin/python"
FIXTURE="$REPO/tests/fixtures/many_tools_server.py"

[[ "$N" =~ ^[0-9]+$ && "$N" -ge 1 ]] || { echo "usage: $0 [N_TOOLS]" >&2; exit 2; }
[[ -x "$PY" ]] || { echo "missing $PY: run scripts/setup-test-env.sh" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is required" >&2; exit 1; }

if [[ "${MEASURE_BUILD:-}" == 1 || ! -x "$TARGET/release/mcpgw" ]]; then
  (cd "$REPO" && cargo build --release --bin mcpgw)
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/mcpgw-mem.XXXXXX")"
GW_PID=""    # the running gateway (also its process group id)
CHILD_PID="" # its upstream child (in a process group of its own)

stop_gateway() {
  local pid="$GW_PID" i
  [[ -n "$pid" ]] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && echo "warning: gateway $pid still running 10 s after SIGTERM" >&2
  fi
  wait "$pid" 2>/dev/null || true
  # The gateway ends its child's process group on shutdown; make sure, and say so if it did not.
  if [[ -n "$CHILD_PID" ]] && kill -0 "$CHILD_PID" 2>/dev/null; then
    sleep 1
    if kill -0 "$CHILD_PID" 2>/dev/null; then
      echo "warning: upstream child $CHILD_PID outlived the gateway; sending SIGTERM to its group" >&2
      kill -TERM -- "-$CHILD_PID" 2>/dev/null || kill -TERM "$CHILD_PID" 2>/dev/null || true
    fi
  fi
  GW_PID="" CHILD_PID=""
}

cleanup() {
  stop_gateway
  if [[ "${MEASURE_KEEP:-}" == 1 ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cp "$TARGET/release/mcpgw" "$WORK/mcpgw"
BIN="$WORK/mcpgw"

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# /proc/PID/status field in MiB ("-" when the process is gone).
mib() {
  awk -v k="$2:" '$1 == k { printf "%.1f", $2 / 1024; found = 1 } END { if (!found) printf "-" }' \
    "/proc/$1/status" 2>/dev/null || printf -- "-"
}

# Seconds since the epoch of the first log line matching the extended regex $2 (log timestamps
# are RFC 3339 UTC).
log_time() {
  local ts
  ts="$(grep -m1 -E "$2" "$1" | awk '{ print $1 }')" || true
  [[ -n "$ts" ]] && date -d "$ts" +%s.%N || echo ""
}

# One MCP session over Streamable HTTP: initialize, then search_tools. Prints the result body.
search_once() {
  local url="$1" query="$2" sid
  local -a h=(-sS --max-time 120 -H 'Content-Type: application/json'
    -H 'Accept: application/json, text/event-stream')
  sid="$(curl "${h[@]}" -D - -o /dev/null "$url" -d '{"jsonrpc":"2.0","id":1,"method":"initialize",
    "params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"measure-memory","version":"0"}}}' |
    awk 'tolower($1) == "mcp-session-id:" { sub(/\r$/, "", $2); print $2 }')"
  [[ -n "$sid" ]] || { echo "no Mcp-Session-Id from $url" >&2; return 1; }
  h+=(-H "Mcp-Session-Id: $sid" -H 'MCP-Protocol-Version: 2025-06-18')
  curl "${h[@]}" -o /dev/null "$url" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  curl "${h[@]}" "$url" -d "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",
    \"params\":{\"name\":\"search_tools\",\"arguments\":{\"query\":\"$query\",\"top_k\":3}}}"
}

ROWS=()
LOAD_LINE=""

# The load run's client: SESSIONS sessions at once, CALLS calls each (Python standard library
# only, one thread and one keep-alive connection per session). Prints a summary line; exits 1
# when a call failed.
load_clients() {
  "$PY" - "$@" <<'PY'
import http.client, json, sys, threading, time, urllib.parse

url, sessions, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
u = urllib.parse.urlparse(url)
base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
failed = []

def post(conn, body, headers):
    conn.request("POST", u.path, json.dumps(body), headers)
    response = conn.getresponse()
    return response, response.read()

def session():
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    response, _ = post(conn, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "measure-memory", "version": "0"}}}, base)
    headers = dict(base, **{"Mcp-Session-Id": response.getheader("Mcp-Session-Id") or "",
                            "MCP-Protocol-Version": "2025-06-18"})
    post(conn, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
    for i in range(calls):
        response, body = post(conn, {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": "everything__echo", "arguments": {"message": "hello"}}}, headers)
        if response.status != 200 or b"Echo: hello" not in body:
            failed.append(body[:300])
    conn.request("DELETE", u.path, headers=headers)
    conn.getresponse().read()
    conn.close()

def guarded():
    try:
        session()
    except Exception as error:  # a session that fails counts all its calls as failed
        failed.extend([repr(error)] * calls)

started = time.time()
threads = [threading.Thread(target=guarded) for _ in range(sessions)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(f"{sessions} sessions x {calls} calls in {time.time() - started:.1f} s, {len(failed)} failed")
if failed:
    print(f"first failure: {failed[0]!r}", file=sys.stderr)
    sys.exit(1)
PY
}

# run_load: idle RSS, RSS right after the load, RSS MEASURE_SETTLE_S later.
run_load() {
  local port cfg log i sessions calls settle everything node
  sessions="${MEASURE_LOAD_SESSIONS:-100}" calls="${MEASURE_LOAD_CALLS:-100}"
  settle="${MEASURE_SETTLE_S:-5}"
  everything="$REPO/.peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
  [[ -f "$everything" ]] || { echo "missing $everything: run scripts/setup-test-env.sh" >&2; exit 1; }
  node="$(command -v node)" || { echo "node is required for the load run" >&2; exit 1; }
  port="$(free_port)"
  cfg="$WORK/load.toml"
  log="$WORK/load.log"
  mkdir -p "$WORK/load-data"
  cat >"$cfg" <<EOF
[gateway]
listen = "127.0.0.1:$port"
exposure = "passthrough"

[[servers]]
name = "everything"
transport = { type = "stdio", command = "$node", args = ["$everything", "stdio"] }

[retrieval]
strategy = "bm25"

[store]
path = "$WORK/load-data/mcpgw.db"
EOF
  echo "==> [load] server-everything over stdio, $sessions sessions x $calls calls, port $port"
  # XDG dirs in the temp dir too, so nothing of the user's (config, sign-ins) is read or written.
  setsid env XDG_DATA_HOME="$WORK/load-data" XDG_CONFIG_HOME="$WORK/load-data" \
    "$BIN" serve --config "$cfg" --log info >/dev/null 2>"$log" &
  GW_PID=$!
  for ((i = 0; ; i++)); do
    grep -qF "server ready" "$log" && break
    if ! kill -0 "$GW_PID" 2>/dev/null || ((i >= TIMEOUT_S * 2)); then
      echo "gateway not ready; log:" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.5
  done
  CHILD_PID="$(ps -o pid= --ppid "$GW_PID" | head -n1 | tr -d ' ')"
  sleep 2 # let start-up allocations settle, as in the other runs
  local cold idle after settled hwm summary
  cold="$(mib "$GW_PID" VmRSS)"
  # One session of ten calls first: what the first connection, session and call set up once
  # (runtime threads, buffers, the audit table's first pages) is part of idle, not of growth.
  load_clients "http://127.0.0.1:$port/mcp" 1 10 >/dev/null ||
    echo "warning: the warm-up session failed" >&2
  sleep "$settle"
  idle="$(mib "$GW_PID" VmRSS)"
  summary="$(load_clients "http://127.0.0.1:$port/mcp" "$sessions" "$calls")" ||
    echo "warning: some calls failed: $summary" >&2
  after="$(mib "$GW_PID" VmRSS)"
  sleep "$settle"
  settled="$(mib "$GW_PID" VmRSS)" hwm="$(mib "$GW_PID" VmHWM)"
  stop_gateway
  printf '    %s\n' "$summary"
  printf '    gateway: VmRSS before any call %s MiB, idle after one warm-up session %s MiB, right after the load %s, %s s later %s (%sx idle), VmHWM %s\n' \
    "$cold" "$idle" "$after" "$settle" "$settled" \
    "$(awk -v a="$settled" -v b="$idle" 'BEGIN { printf "%.2f", a / b }')" "$hwm"
  if grep -qE ' (WARN|ERROR) ' "$log"; then
    echo "    log warnings/errors:"
    grep -E ' (WARN|ERROR) ' "$log" | head -n 10 | sed 's/^/      /'
  fi
  LOAD_LINE="$(printf 'load: idle %s MiB, after %s x %s calls %s MiB, %s s later %s MiB' \
    "$idle" "$sessions" "$calls" "$after" "$settle" "$settled")"
}

# run LABEL STRATEGY
run() {
  local label="$1" strategy="$2" port cfg log launched ready_at i tools embed_ms
  port="$(free_port)"
  cfg="$WORK/$label.toml"
  log="$WORK/$label.log"
  cat >"$cfg" <<EOF
[gateway]
listen = "127.0.0.1:$port"

[[servers]]
name = "many"
description = "Generated tools for a load test"
timeout_s = 300
transport = { type = "stdio", command = "$PY", args = ["$FIXTURE", "$N"] }

[retrieval]
strategy = "$strategy"

[store]
path = "$WORK/store.db"
EOF
  echo "==> [$label] $N tools, strategy $strategy, port $port"
  launched="$(date +%s.%N)"
  # setsid: the gateway leads a new process group, so one SIGTERM to -PID reaches all of it.
  setsid "$BIN" serve --config "$cfg" --log info >/dev/null 2>"$log" &
  GW_PID=$!
  # Vectors for a catalog that has the upstream's tools: before the upstream is connected the
  # gateway reports vectors ready for its empty catalog (tools=0).
  local marker="search vectors ready tools=[1-9]"
  [[ "$strategy" == bm25 ]] && marker="server ready"
  for ((i = 0; ; i++)); do
    grep -qE "$marker" "$log" && break
    if ! kill -0 "$GW_PID" 2>/dev/null; then
      wait "$GW_PID" && rc=0 || rc=$?
      GW_PID=""
      echo "gateway exited (status $rc) before it was ready; log:" >&2
      cat "$log" >&2
      exit 1
    fi
    if ((i >= TIMEOUT_S * 2)); then
      echo "gateway not ready after ${TIMEOUT_S} s; log so far:" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.5
  done
  [[ "$(ps -o pgid= -p "$GW_PID" | tr -d ' ')" == "$GW_PID" ]] ||
    echo "warning: gateway $GW_PID does not lead its process group" >&2
  CHILD_PID="$(ps -o pid= --ppid "$GW_PID" | head -n1 | tr -d ' ')"
  ready_at="$(log_time "$log" "$marker")"
  tools="$(grep -m1 -F "server ready" "$log" | sed -n 's/.*tools=\([0-9]*\).*/\1/p' || true)"
  embed_ms="$(grep -m1 -F "tool embeddings ready" "$log" | sed -n 's/.* ms=\([0-9]*\).*/\1/p' || true)"
  sleep 2 # let start-up allocations settle
  local ready_s embed_s
  ready_s="$(awk -v a="$launched" -v b="$ready_at" 'BEGIN { printf "%.1f", b - a }')"
  embed_s="$(awk -v ms="$embed_ms" 'BEGIN { if (ms == "") printf "-"; else printf "%.1f", ms / 1000 }')"
  local rss hwm anon file child_rss child_hwm
  rss="$(mib "$GW_PID" VmRSS)" hwm="$(mib "$GW_PID" VmHWM)"
  anon="$(mib "$GW_PID" RssAnon)" file="$(mib "$GW_PID" RssFile)"
  child_rss="-" child_hwm="-"
  if [[ -n "$CHILD_PID" ]]; then
    child_rss="$(mib "$CHILD_PID" VmRSS)" child_hwm="$(mib "$CHILD_PID" VmHWM)"
  fi

  local t0 t1 body search_ms rss2 hwm2
  t0="$(date +%s%N)"
  body="$(search_once "http://127.0.0.1:$port/mcp" "export invoices as csv")" || body=""
  t1="$(date +%s%N)"
  search_ms=$(((t1 - t0) / 1000000))
  rss2="$(mib "$GW_PID" VmRSS)" hwm2="$(mib "$GW_PID" VmHWM)"
  local hits
  hits="$(grep -o '"name":"many__[^"]*"' <<<"$body" | cut -d'"' -f4 | paste -sd, -)" || true
  [[ -n "$hits" ]] || echo "warning: search_tools returned no hits: ${body:0:500}" >&2

  stop_gateway
  local stop_s
  stop_s="$(awk -v a="$(log_time "$log" "shutting down")" -v b="$(log_time "$log" "stopped")" \
    'BEGIN { if (a != "" && b != "") printf "%.2f", b - a; else printf "-" }')"

  local load_ms
  load_ms="$(grep -m1 -F "loaded local embedding model" "$log" | sed -n 's/.*elapsed_ms=\([0-9]*\).*/\1/p' || true)"
  printf '    time to ready %s s (model load %s ms, embedding %s ms), shutdown %s s\n' \
    "$ready_s" "${load_ms:-none}" "${embed_ms:-none}" "$stop_s"
  printf '    gateway: VmRSS %s MiB (anon %s, file %s), VmHWM %s MiB; after search: VmRSS %s, VmHWM %s\n' \
    "$rss" "$anon" "$file" "$hwm" "$rss2" "$hwm2"
  printf '    upstream child (Python, not part of the gateway): VmRSS %s MiB, VmHWM %s MiB\n' \
    "$child_rss" "$child_hwm"
  printf '    search_tools (new session + call): %s ms, top hits: %s\n' "$search_ms" "${hits:-none}"
  if grep -qE ' (WARN|ERROR) ' "$log"; then
    echo "    log warnings/errors:"
    grep -E ' (WARN|ERROR) ' "$log" | head -n 10 | sed 's/^/      /'
  fi
  ROWS+=("$(printf '%-6s %6s %9s %10s %11s %13s %11s %12s %9s' "$label" "${tools:-?}" \
    "$ready_s" "$embed_s" "$rss" "$rss2" "$hwm2" "$child_rss" "$search_ms")")
}

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "binary:  $TARGET/release/mcpgw (built $(date -r "$TARGET/release/mcpgw" '+%F %T %Z'))"
newer="$(find "$REPO/crates" -name '*.rs' -newer "$TARGET/release/mcpgw" | wc -l)"
((newer == 0)) || echo "warning: $newer source file(s) under crates/ are newer than the binary (MEASURE_BUILD=1 rebuilds)"
for which in ${MEASURE_RUNS:-cold warm bm25}; do
  case "$which" in
    cold | warm) run "$which" hybrid ;;
    bm25) run bm25 bm25 ;;
    load) run_load ;;
    *) echo "unknown run '$which' in MEASURE_RUNS (cold, warm, bm25, load)" >&2; exit 2 ;;
  esac
done

echo
if ((${#ROWS[@]} > 0)); then
  echo "mcpgw memory, $N upstream tools (MiB; RSS read 2 s after ready; peak = VmHWM after the search)"
  printf '%-6s %6s %9s %10s %11s %13s %11s %12s %9s\n' run tools "ready(s)" "embed(s)" \
    "gw RSS" "gw RSS+srch" "gw peak" "upstream RSS" "search ms"
  printf '%s\n' "${ROWS[@]}"
fi
[[ -z "$LOAD_LINE" ]] || echo "mcpgw memory under $LOAD_LINE"
