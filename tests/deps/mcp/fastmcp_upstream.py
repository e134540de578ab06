"""An MCP server built with FastMCP (PyPI `fastmcp`, pinned in tests/deps/python/fastmcp),
behind the gateway in tests/tests/mcp_fastmcp.rs: Streamable HTTP at /mcp.

FastMCP gives every tool with a typed return value an outputSchema: `exchange_item` returns
an object (a pydantic model), `count_exchanges` a primitive (an int, which FastMCP wraps as
`{"result": …}` and marks `x-fastmcp-wrap-result`). Each execution is counted; GET /count
answers the counts. Prints {"port": N} once it listens.

    python fastmcp_upstream.py
"""

import asyncio
import json
import socket
from collections import Counter

import uvicorn
from fastmcp import FastMCP
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse

server = FastMCP("counting-fastmcp")
counts: Counter = Counter()


class Exchange(BaseModel):
    exchange_id: str
    order_id: str
    item_id: str
    replacement_sku: str
    execution: int


@server.tool
def exchange_item(order_id: str, item_id: str, replacement_sku: str) -> Exchange:
    """Exchange an item of an order for another SKU (needs the user's approval)."""
    counts["exchange_item"] += 1
    execution = counts["exchange_item"]
    return Exchange(
        exchange_id=f"exg_{execution}",
        order_id=order_id,
        item_id=item_id,
        replacement_sku=replacement_sku,
        execution=execution,
    )


@server.tool
def count_exchanges(order_id: str) -> int:
    """Count the exchanges made so far, and make one more (needs the user's approval)."""
    counts["count_exchanges"] += 1
    return counts["exchange_item"] + counts["count_exchanges"]


@server.custom_route("/count", methods=["GET"])
async def count(_: Request) -> JSONResponse:
    return JSONResponse(dict(counts))


async def main() -> None:
    app = server.http_app(path="/mcp")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is printed: a client connecting at once is queued, not refused.
    sock.listen(128)
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    await uv.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
