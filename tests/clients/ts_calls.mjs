// Sequential tool calls from the official TypeScript SDK client (v1, as in Claude Code and
// the Inspector), on one Streamable HTTP connection kept alive between calls, each timed.
//
//   node tests/clients/ts_calls.mjs URL TOOL ARGS_JSON COUNT [WARMUP] [progress]
//
// Prints one JSON line: {"protocolVersion", "contentTypes", "ms": [..COUNT latencies..],
// "p50", "p99", "mean", "over20ms", "progress", "text"} where `text` is the first call's first text
// block, `contentTypes` counts the Content-Type of every response to a POST (so a test can
// tell a JSON body from an event stream), `over20ms` counts the calls that took longer than
// 20 ms, and `progress` counts the progress notifications received: with `progress` as the
// last argument every call asks for them (a progress token), so its answer is a stream. Exit 1 on any failure, with the reason on stderr.
// The SDK is looked for in $MCPGW_PEERS (default <repo>/.peers)/node_modules.

import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const peers = process.env.MCPGW_PEERS ?? path.join(here, "..", "..", ".peers");
const sdk = path.join(peers, "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm");
const { Client } = await import(pathToFileURL(path.join(sdk, "client", "index.js")).href);
const { StreamableHTTPClientTransport } = await import(
  pathToFileURL(path.join(sdk, "client", "streamableHttp.js")).href
);

const [url, tool, argsJson, countText, warmupText, mode] = process.argv.slice(2);
if (!url || !tool || !argsJson || !countText) {
  console.error("usage: ts_calls.mjs URL TOOL ARGS_JSON COUNT [WARMUP]");
  process.exit(2);
}
const count = Number(countText);
const warmup = Number(warmupText ?? "5");
const args = JSON.parse(argsJson);
let progress = 0;
const options = mode === "progress" ? { onprogress: () => (progress += 1) } : undefined;

// Count the response types the gateway chose, without changing what the SDK sees.
const contentTypes = {};
const countingFetch = async (input, init) => {
  const response = await fetch(input, init);
  if ((init?.method ?? "GET") === "POST") {
    const type = (response.headers.get("content-type") ?? "none").split(";")[0];
    contentTypes[type] = (contentTypes[type] ?? 0) + 1;
  }
  return response;
};

// `elicitation`: the client declares elicitation, as Claude Code, VS Code and Cursor do.
const client = new Client(
  { name: "mcpgw-ts-calls", version: "0.1.0" },
  mode === "elicitation" ? { capabilities: { elicitation: {} } } : undefined,
);
const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: countingFetch });
try {
  await client.connect(transport);
  let text = null;
  for (let i = 0; i < warmup; i++) {
    await client.callTool({ name: tool, arguments: args }, undefined, options);
  }
  const ms = [];
  for (let i = 0; i < count; i++) {
    const start = process.hrtime.bigint();
    const result = await client.callTool({ name: tool, arguments: args }, undefined, options);
    ms.push(Number(process.hrtime.bigint() - start) / 1e6);
    if (result.isError) throw new Error(`tool error: ${JSON.stringify(result)}`);
    text ??= result.content?.find((block) => block.type === "text")?.text ?? null;
  }
  const sorted = [...ms].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  console.log(
    JSON.stringify({
      protocolVersion: transport.protocolVersion ?? null,
      contentTypes,
      ms,
      p50: at(0.5),
      p99: at(0.99),
      mean: ms.reduce((a, b) => a + b, 0) / ms.length,
      over20ms: ms.filter((m) => m > 20).length,
      progress,
      text,
    }),
  );
  await transport.terminateSession().catch(() => {});
  await client.close();
} catch (error) {
  console.error(`ts_calls: ${error?.stack ?? error}`);
  process.exit(1);
}
