"""An agent with no Poppy support at all, on the official Python MCP SDK (`mcp` 1.x or 2.x,
whichever virtual environment runs it): a plain OAuth MCP client that sends only the user's
`Authorization: Bearer …` (tests/tests/page_agents.rs). It connects, calls the held tool
`exchange_item` once, and prints one JSON line: what it read, the URL elicitations its handler
got (it declares URL-mode elicitation and answers "accept"), and the upstream's count.

    python token_agent.py MODE GATEWAY_MCP_URL UPSTREAM_URL AUTHORIZATION

MODE: `legacy` (the initialize handshake, 2025-11-25) or `auto` (2026-07-28; `mcp` 2.x only).
"""

import asyncio
import importlib.metadata
import json
import sys
import urllib.request

MODE, GATEWAY, UPSTREAM, AUTHORIZATION = sys.argv[1:5]
TIMEOUT = 20.0
ARGUMENTS = {"order_id": "ord_p1", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}


def executions(tool="exchange_item"):
    with urllib.request.urlopen(UPSTREAM + "/count", timeout=5) as answer:
        return json.load(answer).get(tool, 0)


async def main():
    import mcp

    asked = []

    async def callback(context, params):
        asked.append(params.model_dump(by_alias=True, exclude_none=True, mode="json"))
        return mcp.types.ElicitResult(action="accept")

    headers = {"Authorization": AUTHORIZATION}
    if hasattr(mcp, "Client"):  # mcp 2.x
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers=headers, timeout=TIMEOUT) as http:
            transport = streamable_http_client(GATEWAY, http_client=http)
            async with mcp.Client(transport, mode=MODE, elicitation_callback=callback) as client:
                result = await asyncio.wait_for(client.call_tool("exchange_item", ARGUMENTS), TIMEOUT)
                version = client.protocol_version
    else:
        from mcp.client.streamable_http import streamablehttp_client

        async with streamablehttp_client(GATEWAY, headers=headers, timeout=TIMEOUT) as (read, write, _):
            async with mcp.ClientSession(read, write, elicitation_callback=callback) as session:
                version = (await session.initialize()).protocolVersion
                result = await asyncio.wait_for(session.call_tool("exchange_item", ARGUMENTS), TIMEOUT)
    dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    # A request on the call's stream may be handled just after its result is returned.
    for _ in range(100):
        if asked or not dumped.get("isError", False):
            break
        await asyncio.sleep(0.02)
    content = dumped.get("content") or []
    print(json.dumps({
        "sdk": importlib.metadata.version("mcp"),
        "version": version,
        "isError": dumped.get("isError", False),
        "text": content[0].get("text") if content else None,
        "_meta": dumped.get("_meta"),
        "elicitations": asked,
        "executions": executions(),
    }), flush=True)


asyncio.run(main())
