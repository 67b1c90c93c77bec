#!/usr/bin/env bash
# The Redis server the tests run the cluster pieces against (crates/cluster, and the replica
# tests of crates/cli/tests/it/cluster.rs): a throwaway `redis-server` from Debian's package
# in <peers>/redis/, listening on a free loopback port only, with no persistence (no RDB
# snapshots, no append-only file: nothing here needs to survive a restart).
#
#   scripts/test-redis.sh start    start it if it is not running; prints
#                                  MCPGW_TEST_REDIS_URL=redis://127.0.0.1:PORT/
#                                  and writes that URL to <peers>/redis/url, where the tests
#                                  look when the variable is not set
#   scripts/test-redis.sh stop     stops it and removes the url file
#   scripts/test-redis.sh status   exit 0 when it is running
#
# Each test works under a key namespace of its own, so tests run in parallel; the tests that
# stop Redis run a private server of their own.
# Env: MCPGW_PEERS   where the server's files live (default: <repo>/.peers)
#      REDIS_SERVER  the redis-server binary (default: redis-server on PATH)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${MCPGW_PEERS:-$REPO/.peers}"
DIR="$PEERS/redis"
SERVER="${REDIS_SERVER:-$(command -v redis-server || true)}"

log() { printf '[test-redis] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ -n "$SERVER" && -x "$SERVER" ]] || die "redis-server is not installed: apt-get install redis-server (or set REDIS_SERVER)"

pid() { [[ -f "$DIR/pid" ]] && cat "$DIR/pid"; }

running() {
  local p
  p="$(pid)" || return 1
  [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null && [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == redis-server* ]]
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

url() { echo "redis://127.0.0.1:$(cat "$DIR/port")/"; }

case "${1:-}" in
  start)
    mkdir -p "$DIR"
    # Serialise concurrent starts; the server must not inherit the lock (`8>&-` below).
    exec 8>"$DIR/.lock"
    flock 8
    if running; then
      log "already running on port $(cat "$DIR/port")"
    else
      free_port >"$DIR/port"
      port="$(cat "$DIR/port")"
      # Daemonised by redis itself (it writes the pid file); without the test run's process
      # tag, since it outlives this script by design and is stopped by `stop`.
      env -u MCPGW_TEST_RUN "$SERVER" --bind 127.0.0.1 --port "$port" --daemonize yes \
        --pidfile "$DIR/pid" --dir "$DIR" --logfile "$DIR/server.log" \
        --save '' --appendonly no --protected-mode yes 8>&- ||
        die "redis-server did not start"
      for _ in $(seq 1 100); do
        if running && python3 - "$port" <<'PY' 2>/dev/null; then break; fi
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
s.sendall(b"PING\r\n")
assert s.recv(16).startswith(b"+PONG")
PY
        sleep 0.05
      done
      running || { tail -n 20 "$DIR/server.log" >&2 || true; die "the server did not start"; }
      log "started on 127.0.0.1:$port ($("$SERVER" --version | cut -d' ' -f1-3))"
    fi
    url >"$DIR/url"
    echo "MCPGW_TEST_REDIS_URL=$(url)"
    ;;
  stop)
    if running; then
      p="$(pid)"
      kill "$p"
      for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
      kill -0 "$p" 2>/dev/null && kill -9 "$p"
      log "stopped"
    fi
    rm -f "$DIR/url" "$DIR/pid"
    ;;
  status)
    running
    ;;
  *)
    echo "usage: scripts/test-redis.sh start|stop|status" >&2
    exit 2
    ;;
esac
