// Judges conformance runs of several protocol eras against one expected-failures file.
//
// The suite's own `--expected-failures` judges one run at a time, so a scenario that runs in
// both eras and fails in only one would be "stale" in the other. This reads the checks.json
// files of every era's run and applies the suite's rules to them together:
//   - a failure is a check with status FAILURE or WARNING (after the suite's dedup: the worst
//     status per check id);
//   - `scenario` in the file expects the scenario to fail somewhere; `scenario:check-id` expects
//     that check to fail somewhere;
//   - unexpected: a failing check in any era that no entry covers;
//   - stale: an entry for a scenario that ran and failed nowhere, a check that never failed,
//     or a scenario that did not run at all and is in --scenarios (a list, or `*` for every
//     entry; entries outside it belong to runs judged elsewhere).
//
// Usage: node conformance-baseline.mjs --suite-dir <node_modules/@modelcontextprotocol/conformance>
//          --baseline <file> --side server|client [--scenarios a,b,...] --era <label>=<dir> ...
// Prints per-era counts and the verdicts; exits 1 on an unexpected failure or a stale entry,
// 2 on bad input.

import { createRequire } from "node:module";
import { readFileSync, readdirSync, statSync, existsSync } from "node:fs";
import { join, relative } from "node:path";

const args = process.argv.slice(2);
const eras = [];
let suiteDir, baselinePath, side, scenarioScope;
for (let i = 0; i < args.length; i += 2) {
  const [flag, value] = [args[i], args[i + 1]];
  if (value === undefined) fail(`${flag} needs a value`);
  if (flag === "--suite-dir") suiteDir = value;
  else if (flag === "--baseline") baselinePath = value;
  else if (flag === "--side") side = value;
  else if (flag === "--scenarios") scenarioScope = value === "*" ? "*" : new Set(value.split(",").filter(Boolean));
  else if (flag === "--era") {
    const at = value.indexOf("=");
    if (at < 1) fail(`--era wants <label>=<dir>, got ${value}`);
    eras.push({ label: value.slice(0, at), dir: value.slice(at + 1) });
  } else fail(`unknown argument ${flag}`);
}
if (!suiteDir || !baselinePath || !["server", "client"].includes(side) || eras.length === 0) {
  fail("needs --suite-dir, --baseline, --side server|client and at least one --era");
}

// The suite's own YAML parser, so the file means to us what it means to the suite.
const { parse } = createRequire(join(suiteDir, "package.json"))("yaml");
const file = parse(readFileSync(baselinePath, "utf8")) ?? {};
const entries = (file[side] ?? []).map((entry) => {
  if (typeof entry !== "string") fail(`entry ${JSON.stringify(entry)} is not '<scenario>' or '<scenario>:<check-id>'`);
  const at = entry.indexOf(":");
  return at === -1
    ? { text: entry, scenario: entry }
    : { text: entry, scenario: entry.slice(0, at), check: entry.slice(at + 1) };
});
const wholeScenario = new Set(entries.filter((e) => !e.check).map((e) => e.scenario));

// ---- results -----------------------------------------------------------------
const statusRank = { FAILURE: 3, WARNING: 2, SUCCESS: 1 };
const failing = (status) => status === "FAILURE" || status === "WARNING";

function checksFiles(dir) {
  if (!existsSync(dir)) return [];
  const found = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) found.push(...checksFiles(path));
    else if (name === "checks.json") found.push(path);
  }
  return found;
}

// scenario -> { failed: Map<check, message>, passed: Set<check> } for one era's directory.
function results(dir) {
  const byScenario = new Map();
  for (const path of checksFiles(dir)) {
    let scenario = relative(dir, join(path, "..")).replace(/\\/g, "/");
    scenario = scenario.replace(/-\d{4}-\d{2}-\d{2}T[\d-]+Z$/, "");
    if (side === "server") scenario = scenario.replace(/^server-/, "");
    let checks;
    try {
      checks = JSON.parse(readFileSync(path, "utf8"));
    } catch (error) {
      checks = [{ id: "checks-json", status: "FAILURE", errorMessage: `unreadable ${path}: ${error.message}` }];
    }
    const worst = new Map();
    for (const check of checks) {
      if (!(check.status in statusRank)) continue;
      const seen = worst.get(check.id);
      if (!seen || statusRank[check.status] >= statusRank[seen.status]) worst.set(check.id, check);
    }
    const result = { failed: new Map(), passed: new Set(), counts: { SUCCESS: 0, FAILURE: 0, WARNING: 0 } };
    for (const check of worst.values()) {
      result.counts[check.status] += 1;
      if (failing(check.status)) result.failed.set(check.id, `${check.status}: ${check.errorMessage ?? ""}`);
      else result.passed.add(check.id);
    }
    byScenario.set(scenario, result);
  }
  return byScenario;
}

const runs = eras.map((era) => ({ ...era, results: results(era.dir) }));

// ---- verdicts ----------------------------------------------------------------
const unexpected = [];
const expected = new Set();
for (const run of runs) {
  let scenariosPassed = 0;
  const totals = { SUCCESS: 0, FAILURE: 0, WARNING: 0 };
  for (const [scenario, result] of [...run.results].sort(([a], [b]) => a.localeCompare(b))) {
    for (const status of Object.keys(totals)) totals[status] += result.counts[status];
    if (result.failed.size === 0) {
      scenariosPassed += 1;
      continue;
    }
    for (const [check, message] of result.failed) {
      const covered = wholeScenario.has(scenario) || entries.some((e) => e.scenario === scenario && e.check === check);
      const line = `${scenario}:${check} [${run.label}] ${oneLine(message)}`;
      if (covered) expected.add(wholeScenario.has(scenario) ? scenario : `${scenario}:${check}`);
      else unexpected.push(line);
    }
  }
  console.log(
    `${run.label}: ${scenariosPassed}/${run.results.size} scenarios pass; checks: ${totals.SUCCESS} passed, ` +
      `${totals.FAILURE} failed, ${totals.WARNING} warnings`,
  );
}

const stale = [];
for (const entry of entries) {
  const ran = runs.filter((run) => run.results.has(entry.scenario));
  if (ran.length === 0) {
    if (scenarioScope === "*" || scenarioScope?.has(entry.scenario)) stale.push(`${entry.text} (scenario did not run)`);
    continue;
  }
  if (expected.has(entry.text)) continue;
  if (!entry.check) stale.push(`${entry.text} (passes in ${ran.map((r) => r.label).join(", ")})`);
  else {
    const seen = ran.some((run) => run.results.get(entry.scenario).passed.has(entry.check));
    stale.push(`${entry.text} (${seen ? "passes" : "check not reported"} in ${ran.map((r) => r.label).join(", ")})`);
  }
}

if (expected.size > 0) {
  console.log(`expected failures (in ${baselinePath.split("/").slice(-1)[0]}): ${expected.size}`);
  for (const text of [...expected].sort()) console.log(`  ~ ${text}`);
}
if (stale.length > 0) {
  console.log("STALE baseline entries (remove them):");
  for (const line of stale) console.log(`  ✓ ${line}`);
}
if (unexpected.length > 0) {
  console.log("UNEXPECTED failures (fix them, or add an entry with its reason):");
  for (const line of unexpected) console.log(`  ✗ ${line}`);
}
process.exit(stale.length > 0 || unexpected.length > 0 ? 1 : 0);

function oneLine(text) {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > 200 ? `${flat.slice(0, 197)}...` : flat;
}

function fail(message) {
  console.error(`conformance-baseline: ${message}`);
  process.exit(2);
}
