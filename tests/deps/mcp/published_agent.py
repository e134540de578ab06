"""A model's calls to a published MCP server's tools through the gateway, with the official
Python SDK (`mcp` 1.x, the initialize handshake), for tests/tests/mcp_servers.rs. The gateway
holds the server's tools with the untouched drafts of `poppy-gateway init --mcp`.

    python published_agent.py GATEWAY_MCP_URL POPPY_SESSION_JWT LOG PLAN_JSON

PLAN_JSON: {"held": [{"label", "tool", "arguments"}...], "read_only": [{"tool", "arguments"}...]}.
Each held call is sent as a model sends it (held: a tool error carrying the operation), then
approved (performed), then sent again with the same approval (a replay). LOG is the file the
server's standard input is copied to: every message it received, one JSON line each, so the
tools/call messages in it count what the server itself performed. A read-only call is sent
once (not held: it passes through). Prints one JSON line per call, then {"step": "done"}.
"""

import asyncio
import json
import sys

import mcp
from mcp.client.streamable_http import streamablehttp_client

GATEWAY, SESSION, LOG, PLAN = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
APPROVAL_KEY = "personalagentprotocol.org/approval"
HEADERS = {"Poppy-Session": SESSION, "Poppy-Extensions": '"operations";v="2"'}
TIMEOUT = 60.0


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def received(tool):
    """How many tools/call of `tool` the server received."""
    count = 0
    try:
        with open(LOG, encoding="utf-8") as log:
            for line in log:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if message.get("method") == "tools/call" and message["params"].get("name") == tool:
                    count += 1
    except FileNotFoundError:
        pass
    return count


def dump(result):
    return result.model_dump(by_alias=True, exclude_none=True, mode="json")


async def call(session, tool, arguments, approval=None):
    meta = {APPROVAL_KEY: approval} if approval else None
    try:
        result = await asyncio.wait_for(session.call_tool(tool, arguments, meta=meta), TIMEOUT)
        return dump(result)
    except Exception as e:  # what the SDK raised is what the model would see
        return {"raised": f"{type(e).__name__}: {e}"}


async def main():
    async with streamablehttp_client(GATEWAY, headers=HEADERS, timeout=TIMEOUT) as (read, write, _):
        async with mcp.ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            emit("list", tools=sorted(tool.name for tool in listed.tools))
            for step in PLAN.get("held", []):
                tool, arguments = step["tool"], step["arguments"]
                performed = [received(tool)]
                held = await call(session, tool, arguments)
                performed.append(received(tool))
                operation = (held.get("structuredContent") or {}).get("operation") or {}
                approval = {"operation_id": operation.get("operation_id"), "revision": operation.get("revision")}
                approved = await call(session, tool, arguments, approval)
                performed.append(received(tool))
                replayed = await call(session, tool, arguments, approval)
                performed.append(received(tool))
                emit(step["label"], held=held, approved=approved, replayed=replayed, performed=performed)
            for step in PLAN.get("read_only", []):
                tool = step["tool"]
                before = received(tool)
                result = await call(session, tool, step["arguments"])
                emit("read_only " + tool, result=result, performed=[before, received(tool)])
    emit("done")


asyncio.run(main())
