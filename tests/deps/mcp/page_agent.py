"""A Personal Agent that does not declare the operations extension, on the official Python MCP
SDK (`mcp` 1.x or 2.x, whichever virtual environment runs it) or on FastMCP's client, calling a
held tool whose policy lets the User approve on the Company's page (tests/tests/mcp_page.rs).

Its elicitation handler, when it has one (then the SDK declares URL-mode elicitation), records
each request it gets and answers "accept", as a client does once its user agreed to open the
URL. Prints one JSON line per step; the Rust test asserts on them and on the upstream's counts.

    python page_agent.py CLIENT MODE GATEWAY_MCP_URL UPSTREAM_URL POPPY_SESSION_JWT AUTHORIZATION

AUTHORIZATION: the user's `Bearer …` token (the page is approved by the account it is for).

CLIENT: `sdk` or `fastmcp`. MODE: `legacy` (the initialize handshake, 2025-11-25) or `auto`
(2026-07-28 where the server speaks it); `mcp` 1.x has only the handshake.
"""

import asyncio
import importlib.metadata
import json
import sys
import urllib.request
from contextlib import asynccontextmanager

CLIENT, MODE, GATEWAY, UPSTREAM, SESSION, AUTHORIZATION = sys.argv[1:7]
EXTENSIONS = '"operations";v="2"'
TIMEOUT = 20.0
ARGUMENTS = {"order_id": "ord_p1", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}, default=str), flush=True)


def executions(tool="exchange_item"):
    with urllib.request.urlopen(UPSTREAM + "/count", timeout=5) as answer:
        return json.load(answer).get(tool, 0)


def headers(extension):
    out = {"Poppy-Session": SESSION}
    if AUTHORIZATION:
        # The user's token: the page is approved by the account it is for.
        out["Authorization"] = AUTHORIZATION
    if extension:
        out["Poppy-Extensions"] = EXTENSIONS
    return out


class Asked:
    """The elicitation requests the handler got, as MCP JSON."""

    def __init__(self):
        self.requests = []

    def record(self, params):
        self.requests.append(params.model_dump(by_alias=True, exclude_none=True, mode="json"))

    async def at_least(self, n):
        """Wait (bounded) until n requests arrived: a request on the call's stream may be
        handled just after the call's result is returned."""
        for _ in range(250):
            if len(self.requests) >= n:
                return
            await asyncio.sleep(0.02)


def result_json(result):
    """A tool result as the fields the test reads, whichever client made it."""
    if CLIENT == "fastmcp":
        content = result.content
        return {
            "isError": result.is_error,
            "text": content[0].text if content else None,
            "structuredContent": result.structured_content,
            "_meta": result.meta,
        }
    dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    content = dumped.get("content") or []
    return {
        "isError": dumped.get("isError", False),
        "text": content[0].get("text") if content else None,
        "structuredContent": dumped.get("structuredContent"),
        "_meta": dumped.get("_meta"),
    }


class Agent:
    def __init__(self, call_tool, version):
        self._call_tool = call_tool
        self.version = version

    async def call(self, name, arguments):
        try:
            return result_json(await asyncio.wait_for(self._call_tool(name, arguments), TIMEOUT))
        except Exception as e:  # what the client raised is what the agent would see
            return {"raised": f"{type(e).__name__}: {e}"}


@asynccontextmanager
async def connect(asked, extension=False):
    """A client session; `asked`: an `Asked` to record elicitations in (None: no handler, so
    no elicitation capability is declared)."""
    if CLIENT == "fastmcp":
        from fastmcp import Client
        from fastmcp.client.transports import StreamableHttpTransport

        handler = None
        if asked is not None:
            import mcp_types

            async def handler(message, response_type, params, context):
                asked.record(params)
                return mcp_types.ElicitResult(action="accept")

        transport = StreamableHttpTransport(GATEWAY, headers=headers(extension))
        async with Client(transport, elicitation_handler=handler, mode=MODE, timeout=TIMEOUT) as client:
            yield Agent(
                lambda name, arguments: client.call_tool(name, arguments, raise_on_error=False),
                client.protocol_version,
            )
        return

    import mcp

    callback = None
    if asked is not None:
        ElicitResult = mcp.types.ElicitResult

        async def callback(context, params):
            asked.record(params)
            return ElicitResult(action="accept")

    if hasattr(mcp, "Client"):  # mcp 2.x
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers=headers(extension), timeout=TIMEOUT) as http:
            transport = streamable_http_client(GATEWAY, http_client=http)
            async with mcp.Client(transport, mode=MODE, elicitation_callback=callback) as client:
                yield Agent(client.call_tool, client.protocol_version)
    else:
        from mcp.client.streamable_http import streamablehttp_client

        async with streamablehttp_client(GATEWAY, headers=headers(extension), timeout=TIMEOUT) as (read, write, _):
            async with mcp.ClientSession(read, write, elicitation_callback=callback) as session:
                initialized = await session.initialize()
                yield Agent(session.call_tool, initialized.protocolVersion)


async def main():
    package = "fastmcp" if CLIENT == "fastmcp" else "mcp"
    emit("sdk", client=CLIENT, version=importlib.metadata.version(package), mode=MODE)

    asked = Asked()
    async with connect(asked) as agent:
        page = await agent.call("exchange_item", ARGUMENTS)
        await asked.at_least(1)
        emit("page", version=agent.version, result=page, elicitations=list(asked.requests), executions=executions())
        again = await agent.call("exchange_item", ARGUMENTS)
        await asked.at_least(2)
        emit("again", result=again, elicitations=asked.requests[1:], executions=executions())
        unheld = await agent.call("lookup_order", {"order_id": "ord_p1"})
        emit("session_works", result=unheld)

    async with connect(None) as plain:
        emit("no_handler", version=plain.version, result=await plain.call("exchange_item", ARGUMENTS), executions=executions())

    async with connect(None, extension=True) as poppy:
        emit("with_extension", result=await poppy.call("exchange_item", ARGUMENTS), executions=executions())
    emit("done", executions=executions())


asyncio.run(main())
