"""A Personal Agent driving the gateway with the official Python MCP SDK (`mcp` 1.x or 2.x,
whichever virtual environment runs it), step by step as tests/tests/mcp_sdks.rs expects.

Prints one JSON line per step: what the SDK returned (or raised). The Rust test asserts on
them and on the upstream's execution counts. The agent approves on its user's behalf here
only because this is a test.

    python agent.py GATEWAY_MCP_URL UPSTREAM_URL POPPY_SESSION_JWT [legacy|auto]
"""

import asyncio
import json
import sys
import urllib.request
from contextlib import asynccontextmanager

import mcp

GATEWAY, UPSTREAM, SESSION = sys.argv[1], sys.argv[2], sys.argv[3]
MODE = sys.argv[4] if len(sys.argv) > 4 else "auto"
APPROVAL_KEY = "personalagentprotocol.org/approval"
EXTENSIONS = '"operations";v="2"'
V2 = hasattr(mcp, "Client")
TIMEOUT = 20.0


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def upstream(path, method="GET"):
    request = urllib.request.Request(UPSTREAM + path, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.load(answer)


def executions(tool="exchange_item"):
    return upstream("/count").get(tool, 0)


def dump(result):
    """A tool result as MCP JSON (camelCase), whichever SDK made it."""
    return result.model_dump(by_alias=True, exclude_none=True, mode="json")


def headers(extension):
    out = {"Poppy-Session": SESSION}
    if extension:
        out["Poppy-Extensions"] = EXTENSIONS
    return out


class Agent:
    """One MCP client session: `call` returns the result as JSON or {"raised": ...}."""

    def __init__(self, client, session_id):
        self.client = client
        self._session_id = session_id

    def session_id(self):
        return self._session_id() if self._session_id else None

    async def call(self, name, arguments, approval=None):
        meta = {APPROVAL_KEY: approval} if approval else None
        try:
            result = await asyncio.wait_for(self.client.call_tool(name, arguments, meta=meta), TIMEOUT)
            return dump(result)
        except Exception as e:  # what the SDK raised is what the agent would see
            return {"raised": f"{type(e).__name__}: {e}"}

    async def tools(self):
        listed = await self.client.list_tools()
        return [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in listed.tools]


@asynccontextmanager
async def connect(extension=True):
    if V2:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers=headers(extension), timeout=TIMEOUT) as http:
            async with mcp.Client(streamable_http_client(GATEWAY, http_client=http), mode=MODE) as client:
                yield Agent(client, None)
    else:
        from mcp.client.streamable_http import streamablehttp_client

        async with streamablehttp_client(GATEWAY, headers=headers(extension), timeout=TIMEOUT) as (read, write, sid):
            async with mcp.ClientSession(read, write) as session:
                await session.initialize()
                yield Agent(session, sid)


def exchange(order, sku="stormline-insulated-m"):
    return {"order_id": order, "item_id": "itm_4Qa", "replacement_sku": sku}


def operation_of(result):
    return ((result.get("structuredContent") or {}).get("operation")) or None


def approval_of(operation):
    return {"operation_id": operation["operation_id"], "revision": operation["revision"]}


async def wait_for_executions(n):
    for _ in range(500):
        if executions() >= n:
            return True
        await asyncio.sleep(0.02)
    return False


async def main():
    emit("sdk", version=__import__("importlib.metadata").metadata.version("mcp"), mode=MODE)
    async with connect() as a:
        tools = await a.tools()
        emit("list", tools={t["name"]: t.get("outputSchema") for t in tools}, session_id=a.session_id())

        emit("unheld", result=await a.call("lookup_order", {"order_id": "ord_1"}), executions=executions("lookup_order"))

        held = await a.call("exchange_item", exchange("ord_1"))
        emit("held", result=held, executions=executions())
        op1 = operation_of(held)
        if op1 is None:
            return

        emit("approve", result=await a.call("exchange_item", exchange("ord_1"), approval_of(op1)), executions=executions())
        emit("replay", result=await a.call("exchange_item", exchange("ord_1"), approval_of(op1)), executions=executions())

        # 20 retries while the approved call is being performed.
        op2 = operation_of(await a.call("exchange_item", exchange("ord_2")))
        upstream("/hold", "POST")
        first = asyncio.create_task(a.call("exchange_item", exchange("ord_2"), approval_of(op2)))
        started = await wait_for_executions(2)
        retries = await asyncio.gather(*[a.call("exchange_item", exchange("ord_2"), approval_of(op2)) for _ in range(20)])
        during = executions()
        upstream("/release", "POST")
        emit(
            "concurrent",
            started=started,
            retries=retries,
            executions_during=during,
            first=await first,
            after=await a.call("exchange_item", exchange("ord_2"), approval_of(op2)),
            executions=executions(),
        )
        emit("session_after_in_progress", result=await a.call("lookup_order", {"order_id": "ord_2"}))

        # The same approval from another MCP session of the same Personal Agent Session.
        a_before = a.session_id()
        async with connect() as b:
            b_before = b.session_id()
            replay = await b.call("exchange_item", exchange("ord_1"), approval_of(op1))
            b_after = b.session_id()
            b_works = await b.call("lookup_order", {"order_id": "ord_b"})
        # b is closed (its DELETE sent); a's MCP session must be untouched.
        emit(
            "other_session",
            result=replay,
            a_before=a_before,
            a_after=a.session_id(),
            b_before=b_before,
            b_after=b_after,
            b_works=b_works,
            a_works=await a.call("lookup_order", {"order_id": "ord_a"}),
            executions=executions(),
        )

        # Changed arguments before the call is performed: a new revision, nothing done.
        op3 = operation_of(await a.call("exchange_item", exchange("ord_3")))
        changed = await a.call("exchange_item", exchange("ord_3", "stormline-insulated-l"), approval_of(op3))
        emit("changed", first=op3, result=changed, executions=executions())

    async with connect(extension=False) as plain:
        emit("no_extension", result=await plain.call("exchange_item", exchange("ord_4")), executions=executions())
    emit("done")


asyncio.run(main())
