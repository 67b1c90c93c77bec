-- wrk script for scripts/bench-load.sh: MCP tool calls over Streamable HTTP on keep-alive
-- connections, one MCP session per wrk thread.
--
--   wrk -t C -c C -s mcp-call.lua URL -- TOOL ARGS_JSON EXPECT [PROTOCOL]
--
-- Each thread opens its session first (initialize, then notifications/initialized, taking
-- the Mcp-Session-Id response header and the negotiated protocolVersion from the result),
-- then sends `tools/call TOOL` over and over. ARGS_JSON may hold several argument objects
-- separated by newlines; the calls rotate through them. A call counts as good only with
-- status 200 and EXPECT in the body (the body may be JSON or an SSE stream; both are
-- searched as text). The script runs -t C -c C, so every thread has exactly one connection
-- and its requests are strictly sequential: wrk's request() hook is not told which connection
-- it is writing to, so a session per connection needs a thread per connection.
--
-- done() prints lines for the shell to parse:
--   RESULT key=value ...   counts and latency percentiles (µs, wrk's histogram, all requests)
--   SESSION id             one per thread, so the caller can DELETE the sessions afterwards
--   PROTOCOL version       the versions servers answered, with how many threads got each
--   BAD text               the first bad response of each thread that had one
-- A few `initialize` and `notifications/initialized` requests are in wrk's request count and
-- latency histogram; RESULT's `calls` counts tools/call responses only.

local threads = {}
local next_tid = 1

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
  table.insert(threads, thread)
end

-- Per thread (each wrk thread has its own Lua state, so these globals are per thread).
phase = "init"      -- init -> notify -> call
sid = ""            -- Mcp-Session-Id ("" until known; stays "" for a server without sessions)
proto = ""          -- negotiated protocol version
ok, bad, sse, json, init_fail = 0, 0, 0, 0, 0
bad_sample = ""
local tool, bodies, expect, requested_proto, capabilities
local next_id, turn = 2, 0

function init(args)
  tool = args[1] or "echo"
  expect = args[3] or "Echo: hello"
  requested_proto = args[4] or "2025-11-25"
  capabilities = args[5] or "{}"
  bodies = {}
  for line in string.gmatch(args[2] or '{"message":"hello"}', "[^\n]+") do
    table.insert(bodies, line)
  end
end

local function post(body)
  local headers = {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
  }
  if sid ~= "" then headers["Mcp-Session-Id"] = sid end
  if proto ~= "" then headers["MCP-Protocol-Version"] = proto end
  return wrk.format("POST", nil, headers, body)
end

function request()
  if phase == "init" then
    return post('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"'
      .. requested_proto .. '","capabilities":' .. capabilities
      .. ',"clientInfo":{"name":"bench-load","version":"0"}}}')
  elseif phase == "notify" then
    return post('{"jsonrpc":"2.0","method":"notifications/initialized"}')
  end
  turn = turn % #bodies + 1
  next_id = next_id + 1
  return post('{"jsonrpc":"2.0","id":' .. next_id .. ',"method":"tools/call","params":{"name":"'
    .. tool .. '","arguments":' .. bodies[turn] .. '}}')
end

local function header(headers, name)
  for k, v in pairs(headers) do
    if string.lower(k) == name then return v end
  end
  return nil
end

local function note_bad(what)
  if bad_sample == "" then bad_sample = string.sub(string.gsub(what, "%s+", " "), 1, 300) end
end

function response(status, headers, body)
  if phase == "init" then
    local version = string.match(body or "", '"protocolVersion"%s*:%s*"([^"]+)"')
    if status == 200 and version then
      sid = header(headers, "mcp-session-id") or ""
      proto = version
      phase = "notify"
    else
      init_fail = init_fail + 1
      note_bad("initialize: " .. status .. " " .. (body or ""))
    end
  elseif phase == "notify" then
    -- 202 is what the spec asks; anything else is noted but the calls go ahead.
    if status ~= 202 and status ~= 200 and status ~= 204 then
      note_bad("notifications/initialized: " .. status .. " " .. (body or ""))
    end
    phase = "call"
  else
    local ctype = string.lower(header(headers, "content-type") or "")
    if string.find(ctype, "text/event-stream", 1, true) then sse = sse + 1
    elseif string.find(ctype, "application/json", 1, true) then json = json + 1 end
    if status == 200 and string.find(body or "", expect, 1, true) then
      ok = ok + 1
    else
      bad = bad + 1
      note_bad("tools/call: " .. status .. " " .. (body or ""))
    end
  end
end

function done(summary, latency, requests)
  local t = { ok = 0, bad = 0, sse = 0, json = 0, init_fail = 0 }
  local versions = {}
  for _, thread in ipairs(threads) do
    for k in pairs(t) do t[k] = t[k] + (thread:get(k) or 0) end
    local v = thread:get("proto") or ""
    if v == "" then v = "none" end
    versions[v] = (versions[v] or 0) + 1
  end
  local e = summary.errors
  io.write(string.format(
    "RESULT calls=%d ok=%d bad=%d init_fail=%d sse=%d json=%d requests=%d duration_us=%d "
      .. "p50_us=%d p99_us=%d max_us=%d connect_err=%d read_err=%d write_err=%d status_err=%d timeouts=%d\n",
    t.ok + t.bad, t.ok, t.bad, t.init_fail, t.sse, t.json, summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
  for v, n in pairs(versions) do io.write(string.format("PROTOCOL %s %d\n", v, n)) end
  for _, thread in ipairs(threads) do
    local s = thread:get("sid") or ""
    if s ~= "" then io.write("SESSION " .. s .. "\n") end
    local b = thread:get("bad_sample") or ""
    if b ~= "" then io.write("BAD " .. b .. "\n") end
  end
end
