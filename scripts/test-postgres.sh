#!/usr/bin/env bash
# The PostgreSQL server the tests run the store against: a throwaway cluster of Debian's
# PostgreSQL (15 in CI; any installed version works) in <peers>/postgres/, listening on a free
# loopback port only, with trust authentication (loopback, test data only) and durability off
# (fsync, synchronous_commit and full_page_writes: nothing here needs to survive a crash).
#
#   scripts/test-postgres.sh start   initdb on first use, start it if it is not running, make
#                                    a fresh `mcpgw_test` database; prints
#                                    MCPGW_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/mcpgw_test
#                                    and writes that URL to <peers>/postgres/url, where the
#                                    tests look when the variable is not set. Takes ~1 s (3 s
#                                    the first time).
#   scripts/test-postgres.sh stop    stops it (fast shutdown) and removes the url file
#   scripts/test-postgres.sh status  exit 0 when it is running
#
# Each test makes a schema of its own in `mcpgw_test`, so tests run in parallel.
# Run as root (CI), the server runs as the `postgres` user the Debian package creates.
# Env: MCPGW_PEERS   where the cluster lives (default: <repo>/.peers)
#      PG_BINDIR     PostgreSQL's bin directory (default: the newest /usr/lib/postgresql/*/bin)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${MCPGW_PEERS:-$REPO/.peers}"
DIR="$PEERS/postgres"
DATA="$DIR/data"
DB=mcpgw_test
mkdir -p "$DIR"
# Run as root with the checkout somewhere the postgres user cannot enter (/root is 0700), the
# cluster lives in /var/tmp instead, one per checkout; the port and url files stay in $DIR.
if [[ $(id -u) == 0 ]] && ! runuser -u postgres -- test -x "$PEERS" 2>/dev/null; then
  DATA="/var/tmp/mcpgw-test-postgres-$(printf '%s' "$REPO" | sha256sum | cut -c1-12)"
fi

log() { printf '[test-postgres] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

bindir() {
  if [[ -n "${PG_BINDIR:-}" ]]; then
    echo "$PG_BINDIR"
    return
  fi
  local newest
  newest="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  [[ -n "$newest" ]] || die "PostgreSQL is not installed: apt-get install postgresql-15 (or set PG_BINDIR)"
  echo "$newest"
}

# Runs a PostgreSQL program as the cluster's owner, without the test run's process tag:
# the server outlives this script by design and is stopped by `stop`, not reaped as a leftover.
as_owner() {
  if [[ $(id -u) == 0 ]]; then
    env -u MCPGW_TEST_RUN runuser -u postgres -- "$@"
  else
    env -u MCPGW_TEST_RUN "$@"
  fi
}

running() {
  [[ -f "$DATA/PG_VERSION" ]] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

url() { echo "postgres://postgres@127.0.0.1:$(cat "$DIR/port")/$DB"; }

BIN="$(bindir)"
[[ -x "$BIN/pg_ctl" && -x "$BIN/initdb" ]] || die "no pg_ctl/initdb in $BIN"

case "${1:-}" in
  start)
    mkdir -p "$DIR"
    if [[ $(id -u) == 0 ]]; then
      id postgres >/dev/null 2>&1 || die "no 'postgres' user to run the server as (the Debian package creates it)"
      mkdir -p "$DATA"
      chown postgres: "$DATA"
      chmod 700 "$DATA"
    fi
    # Serialise concurrent starts (two test runs from one checkout). The server must not
    # inherit this descriptor (`8>&-` below), or it would hold the lock for its whole life.
    exec 8>"$DIR/.lock"
    flock 8
    if [[ ! -f "$DATA/PG_VERSION" ]]; then
      log "initdb $DATA ($("$BIN/postgres" --version))"
      as_owner "$BIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --locale=C --no-sync >/dev/null
    fi
    if running; then
      log "already running on port $(cat "$DIR/port")"
    else
      free_port >"$DIR/port"
      port="$(cat "$DIR/port")"
      as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 -o \
        "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories='' \
         -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
        start >/dev/null 8>&- || { tail -n 20 "$DATA/server.log" >&2; die "the server did not start"; }
      PGOPTIONS="-c client_min_messages=warning" "$BIN/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
        -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
      log "started on 127.0.0.1:$port"
    fi
    url >"$DIR/url"
    echo "MCPGW_TEST_POSTGRES_URL=$(url)"
    ;;
  stop)
    if running; then
      as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
      log "stopped"
    fi
    rm -f "$DIR/url"
    ;;
  status)
    running
    ;;
  *)
    echo "usage: scripts/test-postgres.sh start|stop|status" >&2
    exit 2
    ;;
esac
