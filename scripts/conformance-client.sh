#!/usr/bin/env bash
# Runs the official MCP conformance suite's client scenarios against mcpgw's upstream client:
# the binary `mcpgw-conformance-client` (crates/conformance), which connects through the
# `upstream` crate, answers what servers ask as the client behind the gateway would, and logs
# in with `upstream::oauth`.
#
#   1. installs the pinned suite and Node 22 (scripts/conformance-common.sh);
#   2. builds the client;
#   3. authorization: `conformance client --suite auth` (2025-11-25 wire, then 2026-07-28
#      wire), then every other auth/* scenario on its own (2026-07-28 additions, 2025-03-26
#      back-compat, extensions), each judged by the suite against the baseline;
#   4. everything else the suite has for clients except extensions (initialize, tools_call,
#      sse-retry, elicitation defaults, request-metadata, MRTR request state, the SEP-2243
#      headers, JSON Schema preservation...), once per era each scenario applies to
#      (2025-11-25, 2026-07-28), judged across both eras by scripts/conformance-baseline.mjs.
#
# Usage: scripts/conformance-client.sh [scenario...]   (no argument: all of the above)
# Env:   MCPGW_PEERS            install somewhere else (default: <repo>/.peers)
#        MCPGW_CONFORMANCE_OUT  where the harness writes checks.json per scenario
#                               (default: <target dir>/conformance)
#        MCPGW_CONFORMANCE_BASELINE  expected failures (default: tests/conformance/expected-failures.yml)
# Exit:  0 when every failure is listed in the baseline and every listed one still fails;
#        1 otherwise.
set -euo pipefail

TAG=conformance-client
# shellcheck source=scripts/conformance-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/conformance-common.sh"
BASELINE="${MCPGW_CONFORMANCE_BASELINE:-$REPO/tests/conformance/expected-failures.yml}"
OUT="${MCPGW_CONFORMANCE_OUT:-$TARGET/conformance}"
ERAS=(2025-11-25 2026-07-28)
mkdir -p "$OUT"
# One run at a time per output folder.
if command -v flock >/dev/null; then
  exec 8>"$OUT/.lock-client"
  flock 8
fi

# ---- 2. the client -------------------------------------------------------------
log "building mcpgw-conformance-client ..."
(cd "$REPO" && cargo build --quiet -p mcpgw-conformance --bin mcpgw-conformance-client)
CLIENT="$TARGET/debug/mcpgw-conformance-client"
[[ -x "$CLIENT" ]] || die "no client binary at $CLIENT"
[[ "$CLIENT" != *" "* ]] || die "the harness splits --command on spaces; move $CLIENT"

# ---- the scenarios -------------------------------------------------------------
LISTING="$("${CONFORMANCE[@]}" list --client)"
mapfile -t ALL_AUTH < <(sed -n 's/^ *- \(auth\/[^ ]*\).*/\1/p' <<<"$LISTING")
[[ ${#ALL_AUTH[@]} -gt 0 ]] || die "the suite lists no auth scenarios"
# "<scenario> <era>" for each non-auth, non-extension scenario and each era it applies to.
mapfile -t PLAIN_RUNS < <(sed -n 's/^ *- \([^ ]*\) \[\(.*\)\]$/\1 \2/p' <<<"$LISTING" \
  | while read -r scenario versions; do
      [[ "$scenario" == auth/* || ",$versions," == *",extension,"* ]] && continue
      for era in "${ERAS[@]}"; do
        [[ ",$versions," == *",$era,"* ]] && echo "$scenario $era"
      done
    done)
[[ ${#PLAIN_RUNS[@]} -gt 0 ]] || die "the suite lists no client scenarios besides auth"
mapfile -t PLAIN < <(printf '%s\n' "${PLAIN_RUNS[@]}" | cut -d' ' -f1 | sort -u)
log "auth scenarios (${#ALL_AUTH[@]}): ${ALL_AUTH[*]}"
log "other scenarios (${#PLAIN[@]}): ${PLAIN[*]}"

# ---- 3. authorization: the suite judges each run -------------------------------
FAILED=()
SUMMARY=()
run() {  # <label> <conformance client args...>
  local label="$1"; shift
  local rc=0 log="$OUT/last.log" verdict
  "${CONFORMANCE[@]}" client --command "$CLIENT" --expected-failures "$BASELINE" -o "$OUT" "$@" \
    >"$log" 2>&1 || rc=$?
  # Colours off; keep the per-scenario lines, the totals and the baseline verdict.
  sed -e 's/\x1b\[[0-9;]*m//g' "$log" >"$log.plain"
  grep -E '^[✓✗] auth/|^Total:|^Passed:|^ +[~✗✓] |[Bb]aseline' "$log.plain" | sed 's/^/    /' || true
  if grep -q '^ *~ ' "$log.plain"; then verdict="expected failure (baseline)"; else verdict="pass"; fi
  if [[ $rc -ne 0 ]]; then
    verdict="UNEXPECTED (exit $rc; log: $OUT/failed-${label//[^A-Za-z0-9.-]/_}.log)"
    cp "$log" "$OUT/failed-${label//[^A-Za-z0-9.-]/_}.log"
    FAILED+=("$label")
  fi
  log "$label: $verdict"
  SUMMARY+=("$label: $verdict")
}

# ---- 4. the others: every era, judged together ------------------------------------
run_plain() {  # <scenario...>: each in every era it applies to, then the verdict
  local wanted=" $* " scenario era scenarios=() dirs=()
  for era in "${ERAS[@]}"; do
    rm -rf "$OUT/client-$era"
    mkdir -p "$OUT/client-$era"
    dirs+=("$era=$OUT/client-$era")
  done
  for entry in "${PLAIN_RUNS[@]}"; do
    read -r scenario era <<<"$entry"
    [[ "$wanted" == *" $scenario "* ]] || continue
    scenarios+=("$scenario")
    # The exit status says only "something failed"; the judge below decides.
    "${CONFORMANCE[@]}" client --command "$CLIENT" --scenario "$scenario" --spec-version "$era" \
      -o "$OUT/client-$era" >"$OUT/client-$era/$scenario.log" 2>&1 || true
  done
  [[ ${#scenarios[@]} -gt 0 ]] || return 0
  local csv
  csv="$(printf '%s,' "${scenarios[@]}")"
  if judge_eras "$BASELINE" client "$csv" "${dirs[@]}" | sed 's/^/    /'; then
    log "client scenarios by era: as expected"
    SUMMARY+=("client scenarios by era: as expected")
  else
    log "client scenarios by era: UNEXPECTED (logs: $OUT/client-<era>/)"
    SUMMARY+=("client scenarios by era: UNEXPECTED")
    FAILED+=("client scenarios by era")
  fi
}

if [[ $# -gt 0 ]]; then
  plain=()
  for scenario in "$@"; do
    if [[ "$scenario" == auth/* ]]; then
      run "$scenario" --scenario "$scenario"
    else
      plain+=("$scenario")
    fi
  done
  [[ ${#plain[@]} -eq 0 ]] || run_plain "${plain[@]}"
else
  run "suite auth (2025-11-25)" --suite auth
  mapfile -t IN_SUITE < <(sed -n 's/^[✓✗] \(auth\/[^:]*\):.*/\1/p' "$OUT/last.log.plain")
  run "suite auth (2026-07-28)" --suite auth --spec-version 2026-07-28
  for scenario in "${ALL_AUTH[@]}"; do
    if [[ " ${IN_SUITE[*]} " != *" $scenario "* ]]; then
      run "$scenario" --scenario "$scenario"
    fi
  done
  run_plain "${PLAIN[@]}"
fi

log "summary:"
printf '  %s\n' "${SUMMARY[@]}" >&2
if [[ ${#FAILED[@]} -gt 0 ]]; then
  log "unexpected results in: ${FAILED[*]}"
  exit 1
fi
log "all client scenarios as expected (baseline: ${BASELINE#"$REPO"/})"
