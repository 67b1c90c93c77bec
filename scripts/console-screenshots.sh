#!/usr/bin/env bash
# console-screenshots.sh: copies the console's screenshots that the Chromium tests keep as
# artefacts (crates/cli/tests/it/console.rs, under $CARGO_TARGET_DIR/test-artifacts/console/)
# into docs/images/, the ones docs/operations.md shows. Run the console tests first:
#
#   cargo nextest run -p mcpgw-cli -E 'test(/^console::in_chromium/)'
#   scripts/console-screenshots.sh
#
# Fails, copying nothing, when an artefact is missing (a test did not run or no longer takes it).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FROM="${CARGO_TARGET_DIR:-$REPO/target}/test-artifacts/console"
TO="$REPO/docs/images"

# docs/images name <- artefact (the test that takes it: see console.rs)
PAIRS=(
  "console-login.png           sign-in/login.png"
  "console-servers.png         servers.png"
  "console-server-added.png    servers/server-added.png"
  "console-server.png          servers/server.png"
  "console-server-disabled.png servers/server-disabled.png"
  "console-server-test.png     servers/server-test.png"
  "console-tools.png           tools.png"
  "console-search.png          search.png"
  "console-approvals.png       approvals.png"
  "console-approval-edited.png approvals-edited.png"
  "console-held.png            held/held.png"
  "console-connections.png     connections/sign-in/connections-signed-in.png"
  "console-clients.png         clients/add/clients-added.png"
  "console-audit.png           audit-after/audit.png"
)

missing=0
for pair in "${PAIRS[@]}"; do
  read -r _ artefact <<<"$pair"
  if [[ ! -f "$FROM/$artefact" ]]; then
    echo "missing: $FROM/$artefact" >&2
    missing=1
  fi
done
[[ $missing == 0 ]] || { echo "run the console tests first (see the top of this script)" >&2; exit 1; }

mkdir -p "$TO"
for pair in "${PAIRS[@]}"; do
  read -r name artefact <<<"$pair"
  cp "$FROM/$artefact" "$TO/$name"
  echo "docs/images/$name <- $artefact"
done
