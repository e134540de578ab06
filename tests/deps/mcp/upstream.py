"""The MCP server behind the gateway in the SDK tests: built with the official Python SDK
(`mcp` 2.x, MCPServer), Streamable HTTP at /mcp, JSON or SSE answers.

Tools have typed return values, so the SDK gives each an outputSchema. Each execution is
counted; GET /count answers the counts, POST /hold and /release gate exchange_item (a held
call then stays in flight while a test sends retries). Prints {"port": N} once it listens.

    python upstream.py [--json]
"""

import asyncio
import json
import socket
import sys
from collections import Counter

import uvicorn
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

server = MCPServer("counting-python-mcp")
counts: Counter = Counter()
gate = asyncio.Event()
gate.set()


class Exchange(BaseModel):
    exchange_id: str
    order_id: str
    item_id: str
    replacement_sku: str
    execution: int


class Order(BaseModel):
    order_id: str
    status: str
    execution: int


@server.tool()
async def exchange_item(order_id: str, item_id: str, replacement_sku: str, ctx: Context) -> Exchange:
    """Exchange an item of an order for another SKU (needs the user's approval)."""
    counts["exchange_item"] += 1
    execution = counts["exchange_item"]
    await ctx.report_progress(1, 2, "exchanging")
    await gate.wait()
    return Exchange(
        exchange_id=f"exg_{execution}",
        order_id=order_id,
        item_id=item_id,
        replacement_sku=replacement_sku,
        execution=execution,
    )


@server.tool()
async def lookup_order(order_id: str) -> Order:
    """Look an order up (needs no approval)."""
    counts["lookup_order"] += 1
    return Order(order_id=order_id, status="shipped", execution=counts["lookup_order"])


@server.custom_route("/count", methods=["GET"])
async def count(_: Request) -> JSONResponse:
    return JSONResponse(dict(counts))


@server.custom_route("/hold", methods=["POST"])
async def hold(_: Request) -> JSONResponse:
    gate.clear()
    return JSONResponse({"held": True})


@server.custom_route("/release", methods=["POST"])
async def release(_: Request) -> JSONResponse:
    gate.set()
    return JSONResponse({"held": False})


async def main() -> None:
    app = server.streamable_http_app(json_response="--json" in sys.argv[1:])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    await uv.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
