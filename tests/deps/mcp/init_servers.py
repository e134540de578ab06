"""MCP servers that `poppy-gateway init --mcp` meets in the wild (tests/tests/init.rs), built
with the official Python SDK (`mcp` 2.x, its low-level Server), Streamable HTTP at /mcp:

    python init_servers.py --read-only          every tool marked readOnlyHint: nothing to approve
    python init_servers.py --repeating          tools/list lists `send_invoice` twice, and answers
                                                every page with the same nextCursor, as a server
                                                that ignores the cursor does
    python init_servers.py --redirect-to URL    not an MCP server: answers every request with a
                                                307 to URL (a proxy or a moved endpoint)

Each records the headers of every request it receives; GET /seen answers them (a list of
objects, names in lower case). Prints {"port": N} once it listens.
"""

import asyncio
import json
import socket
import sys

import uvicorn

from mcp import types
from mcp.server.lowlevel import Server

seen: list = []

SEND_INVOICE = types.Tool(
    name="send_invoice",
    description="Send an invoice to a customer",
    input_schema={
        "type": "object",
        "required": ["customer", "amount"],
        "properties": {"customer": {"type": "string"}, "amount": {"type": "string"}},
    },
)
READ_ONLY = types.ToolAnnotations(read_only_hint=True)
LOOKUPS = [
    types.Tool(
        name=name,
        description=f"Look {name.split('_')[1]} up",
        input_schema={"type": "object", "properties": {"id": {"type": "string"}}},
        annotations=READ_ONLY,
    )
    for name in ("get_invoice", "get_customer")
]


async def list_tools(_ctx, _params) -> types.ListToolsResult:
    if "--read-only" in sys.argv:
        return types.ListToolsResult(tools=LOOKUPS)
    return types.ListToolsResult(tools=[SEND_INVOICE, LOOKUPS[0], SEND_INVOICE], next_cursor="page2")


async def call_tool(_ctx, params) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=params.name)])


def recording(app):
    """Records each request's headers; answers GET /seen with them."""

    async def recorded(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        if scope["path"] == "/seen":
            body = json.dumps(seen).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            return await send({"type": "http.response.body", "body": body})
        seen.append({k.decode().lower(): v.decode() for k, v in scope["headers"]})
        return await app(scope, receive, send)

    return recorded


def redirecting(target: str):
    async def redirect(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 307,
                    "headers": [(b"location", target.encode()), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    return redirect


async def main() -> None:
    args = sys.argv[1:]
    if "--redirect-to" in args:
        app = recording(redirecting(args[args.index("--redirect-to") + 1]))
    else:
        server = Server("init-test-server", on_list_tools=list_tools, on_call_tool=call_tool)
        app = recording(server.streamable_http_app(json_response=True))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    await uv.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
