// Latency of the official TypeScript SDK client through one target, for scripts/bench-load.sh.
//
//   node ts-client-latency.mjs URL TOOL ARGS_JSON EXPECT [CALLS]
//
// Connects once with `Client` + `StreamableHTTPClientTransport` (the client in Claude Code, the
// Inspector and most agents; its fetch keeps the connection alive), makes 10 warm-up calls, then
// CALLS (default 200) sequential `callTool` calls, each timed alone. A call whose text content
// lacks EXPECT counts as an error. Prints one JSON line: p50/p99/mean in ms, how many calls took
// over 20 ms (a Nagle/delayed-ACK stall costs about 40 ms and may hit only some calls, so the
// p50 alone can swing between runs), errors, and the protocol version the server negotiated. The SDK is loaded from .peers/node_modules (installed
// by scripts/setup-test-env.sh), or from $BENCH_SDK_DIR.
import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";

const [url, tool, argsJson, expect, callsArg] = process.argv.slice(2);
if (!url || !tool || !argsJson || !expect) {
  console.error("usage: ts-client-latency.mjs URL TOOL ARGS_JSON EXPECT [CALLS]");
  process.exit(2);
}
const calls = Number(callsArg ?? 200);
const sdk = process.env.BENCH_SDK_DIR
  ? pathToFileURL(`${process.env.BENCH_SDK_DIR}/`)
  : new URL("../../.peers/node_modules/@modelcontextprotocol/sdk/", import.meta.url);
const { Client } = await import(new URL("dist/esm/client/index.js", sdk));
const { StreamableHTTPClientTransport } = await import(new URL("dist/esm/client/streamableHttp.js", sdk));

const client = new Client({ name: "bench-load-ts", version: "0" });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);

let errors = 0;
let firstError = "";
async function call() {
  const started = performance.now();
  let text = "";
  try {
    const result = await client.callTool({ name: tool, arguments: JSON.parse(argsJson) });
    text = JSON.stringify(result.content ?? result);
  } catch (e) {
    text = `error: ${e?.message ?? e}`;
  }
  const ms = performance.now() - started;
  if (!text.includes(expect)) {
    errors += 1;
    firstError ||= text.slice(0, 300);
  }
  return ms;
}

for (let i = 0; i < 10; i++) await call();
errors = 0;
firstError = "";
const times = [];
for (let i = 0; i < calls; i++) times.push(await call());
times.sort((a, b) => a - b);
// Nearest-rank percentile: the smallest sample with at least p% of the samples at or below it.
const pct = (p) => times[Math.max(0, Math.ceil((p / 100) * times.length) - 1)];
const round = (ms) => Math.round(ms * 100) / 100;

const out = {
  calls,
  p50_ms: round(pct(50)),
  p99_ms: round(pct(99)),
  mean_ms: round(times.reduce((a, b) => a + b, 0) / times.length),
  over_20ms: times.filter((ms) => ms > 20).length,
  errors,
  protocol: transport.protocolVersion ?? null,
  ...(firstError ? { first_error: firstError } : {}),
};
try {
  await transport.terminateSession(); // DELETE, so the target drops the session now
} catch {
  // a server without sessions, or one that refuses DELETE (405): nothing to clean up
}
await client.close();
console.log(JSON.stringify(out));
