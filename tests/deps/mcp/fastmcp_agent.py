"""A Personal Agent built on FastMCP's client (PyPI `fastmcp`), through the gateway to a
FastMCP server (fastmcp_upstream.py), step by step as tests/tests/mcp_fastmcp.rs expects: one
JSON line per step, what the client returned (or raised).

    python fastmcp_agent.py GATEWAY_MCP_URL UPSTREAM_URL POPPY_SESSION_JWT
"""

import asyncio
import dataclasses
import json
import sys
import urllib.request

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

GATEWAY, UPSTREAM, SESSION = sys.argv[1:4]
APPROVAL_KEY = "personalagentprotocol.org/approval"


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}, default=str), flush=True)


def counts():
    with urllib.request.urlopen(UPSTREAM + "/count", timeout=5) as answer:
        return json.load(answer)


def data_of(result):
    """What the client made of the structured content: its type's name, and its value."""
    data = result.data
    if dataclasses.is_dataclass(data):
        value = dataclasses.asdict(data)
    elif hasattr(data, "model_dump"):
        value = data.model_dump()
    else:
        value = data
    return {"type": type(data).__name__, "value": value}


async def main():
    transport = StreamableHttpTransport(
        GATEWAY, headers={"Poppy-Session": SESSION, "Poppy-Extensions": '"operations";v="2"'}
    )
    async with Client(transport) as client:
        tools = {tool.name: tool.outputSchema for tool in await client.list_tools()}
        emit("list", tools=tools)
        arguments = {"order_id": "ord_f1", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}
        try:
            await client.call_tool("exchange_item", arguments)
            emit("default_raises", raised=None)
        except Exception as e:
            emit("default_raises", raised=f"{type(e).__name__}: {e}")
        held = await client.call_tool("exchange_item", arguments, raise_on_error=False)
        operation = held.structured_content["operation"]
        emit("held", is_error=held.is_error, operation=operation, counts=counts())
        approval = {"operation_id": operation["operation_id"], "revision": operation["revision"]}
        done = await client.call_tool("exchange_item", arguments, meta={APPROVAL_KEY: approval})
        emit("approve", data=data_of(done), counts=counts())
        again = await client.call_tool("exchange_item", arguments, meta={APPROVAL_KEY: approval})
        emit("replay", data=data_of(again), counts=counts())

        held = await client.call_tool("count_exchanges", {"order_id": "ord_f1"}, raise_on_error=False)
        operation = held.structured_content["operation"]
        approval = {"operation_id": operation["operation_id"], "revision": operation["revision"]}
        done = await client.call_tool("count_exchanges", {"order_id": "ord_f1"}, meta={APPROVAL_KEY: approval})
        emit("primitive", data=data_of(done), counts=counts())

    # The same tools without the gateway: what FastMCP makes of their results there.
    async with Client(UPSTREAM + "/mcp") as direct:
        emit(
            "direct",
            exchange=data_of(await direct.call_tool("exchange_item", dict(arguments, order_id="ord_f2"))),
            primitive=data_of(await direct.call_tool("count_exchanges", {"order_id": "ord_f2"})),
        )
    emit("done")


asyncio.run(main())
