#!/usr/bin/env python3
"""Scripted MCP client driver for mcpgw's end-to-end tests.

Drives a real MCP peer with the official Python SDK (`mcp` 2.3.x) and prints
ONE JSON object to stdout. Run it with the test venv's interpreter:

    .peers/venv/bin/python tests/clients/mcp_client.py \
        (--stdio CMD [ARG...] [--] | --url URL) [--era legacy|modern|auto] \
        [--header 'Name: value']... [--elicit open[:QUERY]|form:JSON|decline|cancel]
        [--sample TEXT] [--log-level LEVEL] SCRIPT_JSON

SCRIPT_JSON (always the LAST argument; `@path` reads a file, `-` reads stdin)
is a JSON array of steps, e.g.

    [{"op": "list_tools"},
     {"op": "call_tool", "name": "echo", "arguments": {"message": "hi"}}]

Output: {"era": "<negotiated protocol version>", "server": {...}|null,
         "steps": [<one result per step>]}
An MCP error answered by the server is data: {"error": {"code", "message"[, "data"]}}.

--elicit makes the client declare elicitation (form and url) and answer every
`elicitation/create` (a legacy server request, or one inside a 2026-07-28
input_required result) the same way: `open` plays a user who consents to a
URL-mode elicitation: the URL is fetched (QUERY, e.g. `user=bob`, appended to
its query), following redirects, and the answer is `accept`; form mode is
declined (with MCP_CLIENT_CALLBACK_PORT set, a redirect to `/oauth/callback` is
sent to that port instead, as a load balancer in front of replicas would).
`form:JSON` plays a user who fills every form in with the JSON object
and accepts (URL mode is then declined). `decline` / `cancel` answer that. The output then has
"elicitations": [{"mode", "message", "url", "action"[, "status"]}, ...].

--sample TEXT makes the client declare sampling and answer every
`sampling/createMessage` (a legacy server request, or one inside an
input_required result) with an assistant message TEXT from model
"mcpgw-test-model". The output then has "samplings": [{"messages": [text...],
"maxTokens"}, ...].

A `call_tool` step with "meta": {...} sends those keys in the request's `params._meta`
(e.g. a W3C `traceparent`, SEP-414). A `call_tool` step with "progress": true records the call's progress
notifications in its result ("progress": [{"progress", "total", "message"}]);
with "cancel_on_progress": true the call is abandoned (the SDK sends
notifications/cancelled, or closes a 2026-07-28 HTTP request) at the first
progress notification, and the result is {"cancelled": true, "progress": [...]}.
A `listen` step opens a 2026-07-28 `subscriptions/listen` stream for list
changes in the background; `wait_notification` waits (up to "timeout" s,
default 10) for one more notification of "method" than already waited for,
whether it came as a legacy notification or on the listen stream. Scripts with
either op get "notifications": [method, ...] in the output, in arrival order.

Log messages: a `set_level` step ({"level": "info"}) sends `logging/setLevel`
(handshake era; a 2026-07-28 server answers -32601); --log-level LEVEL opts every
2026-07-28 request in to log messages at LEVEL (`_meta` log level). With either,
the output has "logs": [{"level", "logger", "data"}, ...] in arrival order.
A `wait_logs` step ({"count": N, "timeout": s, default 10}) waits until N log
messages have arrived in all: a legacy Streamable HTTP server may send them on
the session's GET stream, which is not ordered with the call's response.

Exit codes: 0 script ran (even if steps returned MCP errors); 1 the connection
failed (spawn, handshake/discover, transport, connection lost mid-script);
2 usage error (bad arguments or script); 3 overall timeout
(env MCP_CLIENT_TIMEOUT seconds, default 60). The reason is printed on stderr.

See README.md beside this file for the eras and every op.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types.version import LATEST_MODERN_VERSION

USAGE = (
    "usage: mcp_client.py (--stdio CMD [ARG...] [--] | --url URL) "
    "[--era legacy|modern|auto] [--header 'Name: value']... "
    "[--elicit open[:QUERY]|form:JSON|decline|cancel] [--sample TEXT] [--log-level LEVEL] SCRIPT_JSON"
)
ERAS = ("legacy", "modern", "auto")
PAGE_CAP = 100  # max pages followed for list_* (guards against non-advancing cursors)


class UsageError(Exception):
    pass


class ConnectionFailed(Exception):
    pass


# --------------------------------------------------------------------------- CLI


def parse_argv(argv: list[str]) -> dict[str, Any]:
    if not argv or argv[0] in ("-h", "--help"):
        raise UsageError(USAGE)
    script_arg, rest = argv[-1], argv[:-1]
    opts: dict[str, Any] = {
        "stdio": None, "url": None, "era": "legacy", "headers": {}, "elicit": None, "sample": None, "log_level": None,
    }
    own = ("--era", "--url", "--stdio", "--header", "--elicit", "--sample", "--log-level")
    i = 0
    while i < len(rest):
        tok = rest[i]
        key, eq, val = tok.partition("=")
        if key in ("--era", "--url", "--header", "--elicit", "--sample", "--log-level"):
            if not eq:
                i += 1
                if i >= len(rest):
                    raise UsageError(f"{key} needs a value\n{USAGE}")
                val = rest[i]
            if key == "--era":
                if val not in ERAS:
                    raise UsageError(f"--era must be one of {ERAS}, got {val!r}")
                opts["era"] = val
            elif key == "--url":
                opts["url"] = val
            elif key == "--elicit":
                opts["elicit"] = parse_elicit(val)
            elif key == "--sample":
                opts["sample"] = val
            elif key == "--log-level":
                opts["log_level"] = val
            else:
                name, colon, value = val.partition(":")
                if not colon or not name.strip():
                    raise UsageError(f"--header wants 'Name: value', got {val!r}")
                opts["headers"][name.strip()] = value.strip()
            i += 1
        elif tok == "--stdio":
            cmd: list[str] = []
            i += 1
            # With a `--` terminator later on, everything up to it is the command verbatim, so a
            # command may itself take flags named like ours (`mcpgw serve --stdio`).
            terminated = "--" in rest[i:]
            while i < len(rest) and rest[i] != "--" and (
                terminated or rest[i].partition("=")[0] not in own
            ):
                cmd.append(rest[i])
                i += 1
            if i < len(rest) and rest[i] == "--":
                i += 1
            if not cmd:
                raise UsageError(f"--stdio needs a command\n{USAGE}")
            opts["stdio"] = cmd
        else:
            raise UsageError(f"unexpected argument {tok!r} (SCRIPT_JSON must be last)\n{USAGE}")
    if (opts["stdio"] is None) == (opts["url"] is None):
        raise UsageError(f"give exactly one of --stdio or --url\n{USAGE}")
    opts["script"] = load_script(script_arg)
    return opts


def parse_elicit(val: str) -> dict[str, Any]:
    kind, colon, query = val.partition(":")
    if kind == "open":
        return {"action": "accept", "query": query if colon else ""}
    if kind == "form" and colon:
        try:
            content = json.loads(query)
        except json.JSONDecodeError as e:
            raise UsageError(f"--elicit form:JSON needs a JSON object: {e}") from None
        if not isinstance(content, dict):
            raise UsageError("--elicit form:JSON needs a JSON object")
        return {"action": "accept", "query": "", "form": content}
    if kind in ("decline", "cancel") and not colon:
        return {"action": kind, "query": ""}
    raise UsageError(f"--elicit wants open[:QUERY], form:JSON, decline or cancel, got {val!r}")


def load_script(arg: str) -> list[dict[str, Any]]:
    if arg == "-":
        text = sys.stdin.read()
    elif arg.startswith("@"):
        with open(arg[1:], encoding="utf-8") as f:
            text = f.read()
    else:
        text = arg
    try:
        script = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"SCRIPT_JSON is not valid JSON: {e}") from None
    if not isinstance(script, list) or not all(isinstance(s, dict) and isinstance(s.get("op"), str) for s in script):
        raise UsageError('SCRIPT_JSON must be a JSON array of objects with an "op" string')
    for step in script:
        if step["op"] not in OPS:
            raise UsageError(f"unknown op {step['op']!r}; known: {sorted(OPS)}")
        field = REQUIRED_STRING.get(step["op"])
        if field is not None and not isinstance(step.get(field), str):
            raise UsageError(f"op {step['op']!r} needs a string {field!r}: {json.dumps(step)}")
        args = step.get("arguments")
        if args is not None and not isinstance(args, dict):
            raise UsageError(f'"arguments" must be an object: {json.dumps(step)}')
    return script


# --------------------------------------------------------------------------- ops


def dump(model: Any) -> Any:
    """A pydantic model (or list of them) as plain wire-shaped JSON."""
    if isinstance(model, list):
        return [dump(m) for m in model]
    if hasattr(model, "model_dump"):
        return model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return model


async def paginate(fetch: Any, attr: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(PAGE_CAP):
        page = await fetch(cursor)
        items.extend(getattr(page, attr))
        cursor = page.next_cursor
        if cursor is None or cursor in seen:
            break
        seen.add(cursor)
    return items


async def op_list_tools(client: Client, step: dict[str, Any]) -> Any:
    tools = await paginate(lambda c: client.list_tools(cursor=c), "tools")
    if step.get("full"):
        return dump(tools)
    return [{"name": t.name, "description": t.description} for t in tools]


async def op_call_tool(client: Client, step: dict[str, Any]) -> Any:
    progress: list[dict[str, Any]] = []
    first_progress = anyio.Event()
    callback = None
    if step.get("progress") or step.get("cancel_on_progress"):

        async def callback(value: float, total: float | None, message: str | None) -> None:
            progress.append({"progress": value, "total": total, "message": message})
            first_progress.set()

    async def call() -> Any:
        return await client.call_tool(
            step["name"], step.get("arguments") or {}, progress_callback=callback, meta=step.get("meta")
        )

    if step.get("cancel_on_progress"):
        # Abandoning the call is how the SDK cancels it.
        async with anyio.create_task_group() as tg:

            async def run_call() -> None:
                await call()
                tg.cancel_scope.cancel()

            tg.start_soon(run_call)
            await first_progress.wait()
            tg.cancel_scope.cancel()
        return {"cancelled": True, "progress": progress}
    result = await call()
    out = {
        "content": dump(list(result.content)),
        "structuredContent": result.structured_content,
        "isError": bool(result.is_error),
    }
    if step.get("progress"):
        out["progress"] = progress
    return out


async def op_list_resources(client: Client, step: dict[str, Any]) -> Any:
    return dump(await paginate(lambda c: client.list_resources(cursor=c), "resources"))


async def op_list_resource_templates(client: Client, step: dict[str, Any]) -> Any:
    return dump(await paginate(lambda c: client.list_resource_templates(cursor=c), "resource_templates"))


async def op_read_resource(client: Client, step: dict[str, Any]) -> Any:
    result = await client.read_resource(step["uri"])
    return {"contents": dump(list(result.contents))}


async def op_list_prompts(client: Client, step: dict[str, Any]) -> Any:
    prompts = await paginate(lambda c: client.list_prompts(cursor=c), "prompts")
    if step.get("full"):
        return dump(prompts)
    return [{"name": p.name, "description": p.description} for p in prompts]


async def op_get_prompt(client: Client, step: dict[str, Any]) -> Any:
    return dump(await client.get_prompt(step["name"], step.get("arguments") or {}))


async def op_complete(client: Client, step: dict[str, Any]) -> Any:
    ref = step.get("ref")
    if not isinstance(ref, dict):
        raise UsageError(f'op "complete" needs a "ref" object: {json.dumps(step)}')
    model = types.PromptReference if ref.get("type") == "ref/prompt" else types.ResourceTemplateReference
    argument = step.get("argument") or {}
    result = await client.complete(model.model_validate(ref), argument, step.get("context"))
    return dump(result.completion)


LISTS = {
    "tools": ("list_tools", "tools"),
    "resources": ("list_resources", "resources"),
    "resource_templates": ("list_resource_templates", "resource_templates"),
    "prompts": ("list_prompts", "prompts"),
}


async def op_list_pages(client: Client, step: dict[str, Any]) -> Any:
    """Each page of one list as the server sent it: its item count and nextCursor."""
    if step.get("list") not in LISTS:
        raise UsageError(f'op "list_pages" needs "list" to be one of {sorted(LISTS)}: {json.dumps(step)}')
    method, attr = LISTS[step["list"]]
    pages: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(PAGE_CAP):
        page = await getattr(client, method)(cursor=cursor)
        pages.append({"count": len(getattr(page, attr)), "nextCursor": page.next_cursor})
        cursor = page.next_cursor
        if cursor is None:
            break
    return pages


async def op_subscribe(client: Client, step: dict[str, Any]) -> Any:
    return dump(await client.subscribe_resource(step["uri"]))  # legacy only


async def op_unsubscribe(client: Client, step: dict[str, Any]) -> Any:
    return dump(await client.unsubscribe_resource(step["uri"]))  # legacy only


async def op_ping(client: Client, step: dict[str, Any]) -> Any:
    await client.session.send_ping()  # removed in 2026-07-28: a modern peer answers with an error
    return {}


async def op_discover(client: Client, step: dict[str, Any]) -> Any:
    return await client.session.send_discover(step.get("version", LATEST_MODERN_VERSION))


async def op_set_level(client: Client, step: dict[str, Any]) -> Any:
    return dump(await client.set_logging_level(step["level"]))


async def op_sleep(client: Client, step: dict[str, Any]) -> Any:
    await anyio.sleep(float(step.get("seconds", 0)))
    return {}


async def op_mark(client: Client, step: dict[str, Any]) -> Any:
    """Creates the file "path": tells a test waiting outside that the script got this far."""
    with open(step["path"], "w", encoding="utf-8"):
        pass
    return {}


class Notifications:
    """Every notification's method in arrival order, legacy or listen-stream, and a wake-up."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        # The URI of every notifications/resources/updated, in arrival order.
        self.updated: list[str] = []
        self.waited: dict[str, int] = {}
        self.changed = anyio.Event()
        self.task_group: Any = None

    def record(self, method: str | None, uri: str | None = None) -> None:
        if method is None:
            return
        if uri is not None:
            self.updated.append(uri)
        self.methods.append(method)
        self.changed.set()
        self.changed = anyio.Event()


LISTEN_EVENTS = {
    "ToolsListChanged": "notifications/tools/list_changed",
    "PromptsListChanged": "notifications/prompts/list_changed",
    "ResourcesListChanged": "notifications/resources/list_changed",
    "ResourceUpdated": "notifications/resources/updated",
}


async def op_listen(client: Client, step: dict[str, Any]) -> Any:
    notes: Notifications = step["_notifications"]
    opened = anyio.Event()
    honored: dict[str, Any] = {}

    async def listen() -> None:
        async with client.listen(
            tools_list_changed=True,
            prompts_list_changed=True,
            resources_list_changed=True,
            resource_subscriptions=step.get("resources", ()),
        ) as subscription:
            honored.update(dump(subscription.honored))
            opened.set()
            async for event in subscription:
                notes.record(LISTEN_EVENTS.get(type(event).__name__, type(event).__name__), getattr(event, "uri", None))

    notes.task_group.start_soon(listen)
    await opened.wait()
    return {"honored": honored}


async def op_wait_notification(client: Client, step: dict[str, Any]) -> Any:
    notes: Notifications = step["_notifications"]
    method = step["method"]
    if "uri" in step:  # a resource update for this URI, however many came before
        with anyio.move_on_after(float(step.get("timeout", 10))):
            while step["uri"] not in notes.updated:
                await notes.changed.wait()
            return {"method": method, "uri": step["uri"]}
        return {"timedOut": True, "method": method, "uri": step["uri"]}
    want = notes.waited.get(method, 0) + 1
    with anyio.move_on_after(float(step.get("timeout", 10))):
        while notes.methods.count(method) < want:
            await notes.changed.wait()
        notes.waited[method] = want
        return {"method": method, "count": want}
    return {"timedOut": True, "method": method}


async def op_wait_logs(client: Client, step: dict[str, Any]) -> Any:
    logs: list[dict[str, Any]] = step["_logs"]
    want = int(step["count"])
    with anyio.move_on_after(float(step.get("timeout", 10))):
        while len(logs) < want:
            await anyio.sleep(0.02)
        return {"count": len(logs)}
    return {"timedOut": True, "count": len(logs)}


REQUIRED_STRING = {
    "call_tool": "name",
    "read_resource": "uri",
    "subscribe": "uri",
    "unsubscribe": "uri",
    "get_prompt": "name",
    "wait_notification": "method",
    "set_level": "level",
    "mark": "path",
}

OPS = {
    "list_tools": op_list_tools,
    "call_tool": op_call_tool,
    "list_resources": op_list_resources,
    "list_resource_templates": op_list_resource_templates,
    "read_resource": op_read_resource,
    "list_prompts": op_list_prompts,
    "get_prompt": op_get_prompt,
    "complete": op_complete,
    "list_pages": op_list_pages,
    "ping": op_ping,
    "discover": op_discover,
    "sleep": op_sleep,
    "mark": op_mark,
    "set_level": op_set_level,
    "listen": op_listen,
    "wait_notification": op_wait_notification,
    "wait_logs": op_wait_logs,
    "subscribe": op_subscribe,
    "unsubscribe": op_unsubscribe,
}


# --------------------------------------------------------------------------- run


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for e in exc.exceptions:
            out.extend(leaf_exceptions(e))
        return out
    return [exc]


def describe(exc: BaseException) -> str:
    return "; ".join(f"{type(e).__name__}: {e}" for e in leaf_exceptions(exc))


def is_connection_lost(exc: BaseException) -> bool:
    """Transport-level failures (not answers from the peer)."""
    for e in leaf_exceptions(exc):
        if isinstance(e, MCPError):
            # The SDK's own synthesized error when the transport is gone.
            if e.code == types.CONNECTION_CLOSED and e.message == "Connection closed":
                return True
        elif isinstance(
            e,
            (OSError, httpx2.TransportError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream),
        ):
            return True
    return False


def error_data(exc: BaseException) -> dict[str, Any]:
    leaves = leaf_exceptions(exc)
    mcp_errors = [e for e in leaves if isinstance(e, MCPError)]
    if mcp_errors:
        err = mcp_errors[0].error
        out: dict[str, Any] = {"code": err.code, "message": err.message}
        if err.data is not None:
            out["data"] = err.data
        return {"error": out}
    # A client-side rejection (e.g. a result that fails schema validation).
    return {"error": {"code": None, "message": describe(exc), "kind": type(leaves[0]).__name__}}


def with_query(url: str, query: str) -> str:
    if not query:
        return url
    return f"{url}{'&' if '?' in url else '?'}{query}"


def elicitation_callback(opts: dict[str, Any], record: list[dict[str, Any]]) -> Any:
    """The user behind --elicit: answers every elicitation alike, and writes each down."""
    answer = opts["elicit"]

    async def callback(context: Any, params: Any) -> types.ElicitResult:
        mode = getattr(params, "mode", None) or "form"
        entry: dict[str, Any] = {"mode": mode, "message": params.message}
        action = answer["action"]
        content = None
        if mode == "url" and "form" in answer and action == "accept":
            action = "decline"  # this user only fills forms in
        elif mode == "url":
            entry["url"] = params.url
            if action == "accept":
                # The browser: opens the URL and follows every redirect (to the gateway's
                # callback, in mcpgw's tests) before the client says "accept".
                # MCP_CLIENT_CALLBACK_PORT plays a load balancer in front of replicas: the
                # return to `/oauth/callback` goes to that port instead.
                callback_port = os.environ.get("MCP_CLIENT_CALLBACK_PORT")
                async with httpx2.AsyncClient(follow_redirects=not callback_port, timeout=30.0) as browser:
                    response = await browser.get(with_query(params.url, answer["query"]))
                    for _ in range(10):
                        if not (callback_port and response.is_redirect):
                            break
                        target = httpx2.URL(response.headers["location"])
                        if not target.is_absolute_url:
                            target = response.url.join(target)
                        if target.path == "/oauth/callback":
                            target = target.copy_with(port=int(callback_port))
                        response = await browser.get(target)
                entry["status"] = response.status_code
        elif action == "accept" and "form" in answer:
            schema = getattr(params, "requested_schema", None)
            entry["schema"] = schema if isinstance(schema, dict) else getattr(schema, "model_dump", lambda **_: schema)(by_alias=True, exclude_none=True)
            content = answer["form"]
            entry["content"] = content
        elif action == "accept":
            action = "decline"  # no one to fill a form in
        entry["action"] = action
        record.append(entry)
        if content is not None:
            return types.ElicitResult(action=action, content=content)
        return types.ElicitResult(action=action)

    return callback


def sampling_callback(opts: dict[str, Any], record: list[dict[str, Any]]) -> Any:
    """The model behind --sample: answers every sampling request with the same text."""

    async def callback(context: Any, params: Any) -> types.CreateMessageResult:
        texts = [getattr(m.content, "text", None) for m in params.messages]
        record.append({"messages": texts, "maxTokens": params.max_tokens})
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=opts["sample"]),
            model="mcpgw-test-model",
            stop_reason="endTurn",
        )

    return callback


async def connect(
    stack: AsyncExitStack,
    opts: dict[str, Any],
    elicitations: list[dict[str, Any]],
    samplings: list[dict[str, Any]] | None = None,
    notifications: Notifications | None = None,
    logs: list[dict[str, Any]] | None = None,
) -> Client:
    era = opts["era"]
    # legacy: initialize handshake at 2025-11-25 (LATEST_HANDSHAKE_VERSION);
    # modern: pin 2026-07-28 (adopted without handshake), then a real server/discover below;
    # auto:   the SDK's own probe (server/discover, falls back to initialize).
    mode = {"legacy": "legacy", "modern": LATEST_MODERN_VERSION, "auto": "auto"}[era]
    if opts["stdio"] is not None:
        cmd = opts["stdio"]
        # Pass the whole environment (the SDK default keeps only HOME/PATH/...).
        server: Any = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    else:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=opts["headers"], timeout=httpx2.Timeout(30.0, read=300.0))
        )
        server = streamable_http_client(opts["url"], http_client=http)
    client = Client(
        server,
        mode=mode,
        cache=None,  # every step must reach the wire
        client_info=types.Implementation(name="mcpgw-test-client", version="0.1.0"),
        # A callback makes the SDK declare elicitation {form, url}; without one, none.
        elicitation_callback=elicitation_callback(opts, elicitations) if opts["elicit"] else None,
        sampling_callback=sampling_callback(opts, samplings if samplings is not None else []) if opts["sample"] else None,
        message_handler=notification_handler(notifications) if notifications is not None else None,
        logging_callback=logging_callback(logs) if logs is not None else None,
        log_level=opts["log_level"],
    )
    try:
        await stack.enter_async_context(client)
    except Exception as e:
        raise ConnectionFailed(f"connect ({era}) failed: {describe(e)}") from e
    if era == "modern":
        try:
            raw = await client.session.send_discover(LATEST_MODERN_VERSION)
            client.session.adopt(types.DiscoverResult.model_validate(raw))
        except Exception as e:
            raise ConnectionFailed(f"server/discover (modern era) failed: {describe(e)}") from e
    return client


def notification_handler(notifications: Notifications) -> Any:
    async def handler(message: Any) -> None:
        if not isinstance(message, Exception):
            method = getattr(message, "method", None)
            params = getattr(message, "params", None)
            meta = getattr(params, "meta", None) or {}
            if SUBSCRIPTION_ID_META_KEY in meta:
                # A listen stream's event: the SDK tees it here too; `listen` records it.
                await anyio.lowlevel.checkpoint()
                return
            uri = getattr(params, "uri", None) if method == "notifications/resources/updated" else None
            notifications.record(method, None if uri is None else str(uri))
        await anyio.lowlevel.checkpoint()

    return handler


def logging_callback(logs: list[dict[str, Any]]) -> Any:
    async def callback(params: types.LoggingMessageNotificationParams) -> None:
        logs.append({"level": params.level, "logger": params.logger, "data": params.data})

    return callback


def server_info(client: Client) -> Any:
    info = client.server_info
    return None if info is None else {"name": info.name, "version": info.version}


async def run(opts: dict[str, Any]) -> dict[str, Any]:
    steps: list[Any] = []
    out: dict[str, Any] = {"era": None, "server": None, "steps": steps}
    elicitations: list[dict[str, Any]] = []
    if opts["elicit"]:
        out["elicitations"] = elicitations
    samplings: list[dict[str, Any]] = []
    if opts["sample"]:
        out["samplings"] = samplings
    notifications = None
    if any(step["op"] in ("listen", "wait_notification", "subscribe") for step in opts["script"]):
        notifications = Notifications()
        out["notifications"] = notifications.methods
        out["updated"] = notifications.updated
    logs = None
    if opts["log_level"] is not None or any(step["op"] in ("set_level", "wait_logs") for step in opts["script"]):
        logs = []
        out["logs"] = logs
    async with AsyncExitStack() as stack:
        client = await connect(stack, opts, elicitations, samplings, notifications, logs)
        out["era"] = client.protocol_version
        out["server"] = server_info(client)
        if notifications is not None:
            # Background listen streams; cancelled (below) before the client closes.
            notifications.task_group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(notifications.task_group.cancel_scope.cancel)
        for i, step in enumerate(opts["script"]):
            if notifications is not None:
                step["_notifications"] = notifications
            if logs is not None:
                step["_logs"] = logs
            try:
                steps.append(await OPS[step["op"]](client, step))
            except Exception as e:  # MCP errors and client-side rejections are data
                if is_connection_lost(e):
                    sys.stderr.write(f"partial output: {json.dumps(out)}\n")
                    raise ConnectionFailed(f"connection lost at step {i} ({step['op']}): {describe(e)}") from e
                steps.append(error_data(e))
    return out


def main(argv: list[str]) -> int:
    try:
        opts = parse_argv(argv)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    timeout = float(os.environ.get("MCP_CLIENT_TIMEOUT", "60"))

    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(timeout):
            return await run(opts)

    try:
        out = anyio.run(bounded)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - classify, report on stderr, exit non-zero
        leaves = leaf_exceptions(e)
        if os.environ.get("MCP_CLIENT_DEBUG"):
            traceback.print_exception(e)
        for kind, code, prefix in (
            (UsageError, 2, ""),
            (ConnectionFailed, 1, ""),
            (TimeoutError, 3, None),
        ):
            hit = next((x for x in leaves if isinstance(x, kind)), None)
            if hit is None:
                continue
            if prefix is None:
                print(f"mcp_client: timed out after {timeout:g} s (MCP_CLIENT_TIMEOUT)", file=sys.stderr)
            else:
                print(f"mcp_client: {hit}", file=sys.stderr)
            return code
        print(f"mcp_client: connection failed: {describe(e)}", file=sys.stderr)
        return 1
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
