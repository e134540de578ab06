"""What real MCP servers do *during* an approved call, driven with the official Python SDK
(`mcp` 2.x) through the gateway, one scenario per run (tests/tests/mcp_during.rs asserts on
what it prints: one JSON line per step, as agent.py does).

    python during.py SCENARIO GATEWAY_MCP_URL UPSTREAM_URL POPPY_SESSION_JWT

- `rounds`: a held tool that asks the user a question (2026-07-28 `input_required`): the
  call is approved; the SDK answers the question (an elicitation callback) and calls again
  with the server's `requestState`, under the same approval; then a replay.
- `elicit`: the same held tool in an MCP session (`mode="legacy"`, 2025-11-25): the server
  asks its question mid-call (`elicitation/create` on the call's SSE stream) and waits for
  the answer; the SDK answers it while the call runs.
- `cancel`: the approved call times out in the SDK, which sends `notifications/cancelled`
  (an MCP session, `mode="legacy"`); the call is then retried with the same approval until
  its answer comes.
"""

import asyncio
import json
import sys
import urllib.request

import httpx2
import mcp
from mcp import types
from mcp.client.streamable_http import streamable_http_client

SCENARIO, GATEWAY, UPSTREAM, SESSION = sys.argv[1:5]
APPROVAL_KEY = "personalagentprotocol.org/approval"
RETRY_KEY = "personalagentprotocol.org/retry"
HEADERS = {"Poppy-Session": SESSION, "Poppy-Extensions": '"operations";v="2"'}


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def upstream(path, method="GET"):
    request = urllib.request.Request(UPSTREAM + path, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.load(answer)


def dump(result):
    return result.model_dump(by_alias=True, exclude_none=True, mode="json")


async def call(client, name, arguments, approval=None, timeout=None):
    meta = {APPROVAL_KEY: approval} if approval else None
    try:
        return dump(await client.call_tool(name, arguments, meta=meta, read_timeout_seconds=timeout))
    except Exception as e:  # what the SDK raised is what the agent would see
        return {"raised": f"{type(e).__name__}: {e}"}


def approval_of(result):
    operation = (result.get("structuredContent") or {}).get("operation")
    return {"operation_id": operation["operation_id"], "revision": operation["revision"]} if operation else None


def exchange(order):
    return {"order_id": order, "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}


async def answer_yes(context, params):
    emit("asked", message=params.message)
    return types.ElicitResult(action="accept", content={"confirm": True})


async def rounds(mode="auto"):
    http = httpx2.AsyncClient(headers=HEADERS, timeout=20)
    client = mcp.Client(streamable_http_client(GATEWAY, http_client=http), elicitation_callback=answer_yes, mode=mode)
    async with http, client:
        await client.list_tools()
        held = await call(client, "confirm_exchange", exchange("ord_r1"))
        emit("held", result=held, counts=upstream("/count"))
        approval = approval_of(held)
        if approval is None:
            return
        emit("approve", result=await call(client, "confirm_exchange", exchange("ord_r1"), approval), counts=upstream("/count"))
        emit("replay", result=await call(client, "confirm_exchange", exchange("ord_r1"), approval), counts=upstream("/count"))


async def wait_for(predicate, what):
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise TimeoutError(what)


async def cancel():
    # The SDK's notification is a POST of its own: this notes when the gateway answered it.
    cancellations_answered = asyncio.Event()

    async def on_response(response):
        if b"notifications/cancelled" in (response.request.content or b""):
            emit("cancellation_answered", status=response.status_code)
            cancellations_answered.set()

    http = httpx2.AsyncClient(headers=HEADERS, timeout=20, event_hooks={"response": [on_response]})
    async with http, mcp.Client(streamable_http_client(GATEWAY, http_client=http), mode="legacy") as client:
        held = await call(client, "exchange_item", exchange("ord_c1"))
        approval = approval_of(held)
        emit("held", result=held, counts=upstream("/count"))
        if approval is None:
            return
        upstream("/hold", "POST")
        # The SDK gives up after 1 s and sends notifications/cancelled for the call.
        timed_out = await call(client, "exchange_item", exchange("ord_c1"), approval, timeout=1.0)
        await asyncio.wait_for(cancellations_answered.wait(), 10)
        # Forwarded, the server cancels the call at its gate: wait for that before opening it.
        if upstream("/count").get("cancel_received"):
            await wait_for(lambda: upstream("/count").get("cancelled"), "the server cancelled the call")
        emit("timed_out", result=timed_out, counts=upstream("/count"))
        upstream("/release", "POST")
        retries = []
        for _ in range(200):
            result = await call(client, "exchange_item", exchange("ord_c1"), approval)
            retries.append(result)
            advice = (result.get("_meta") or {}).get(RETRY_KEY) or {}
            if advice.get("error") != "operation_in_progress":
                break
            await asyncio.sleep(0.05)
        emit("retried", result=retries[-1], retries=len(retries), counts=upstream("/count"))
        emit("after", result=await call(client, "exchange_item", exchange("ord_c1"), approval), counts=upstream("/count"))


async def elicit():
    await rounds(mode="legacy")


asyncio.run({"rounds": rounds, "elicit": elicit, "cancel": cancel}[SCENARIO]())
emit("done")
