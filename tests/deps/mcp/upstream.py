"""The MCP server behind the gateway in the SDK tests: built with the official Python SDK
(`mcp` 2.x, MCPServer), Streamable HTTP at /mcp, JSON or SSE answers.

Tools have typed return values, so the SDK gives each an outputSchema. Each execution is
counted; GET /count answers the counts, POST /hold and /release gate exchange_item (a held
call then stays in flight while a test sends retries). Prints {"port": N} once it listens.

confirm_exchange asks the user to confirm (a resolver returning `Elicit`): at 2026-07-28 the
SDK answers `resultType: "input_required"` with a sealed `requestState`, and runs the tool
when the client calls again with the answer; `confirm_exchange:asked` counts the questions,
`confirm_exchange` the executions. A call cancelled at the gate counts as `cancelled`.

restream_exchange closes its SSE stream right after the priming event (SEP-1699: MCP's
`close_sse_stream`), then waits at the gate; its result reaches a client that resumes the
stream (GET with `Last-Event-ID`, from the in-memory event store). SSE mode only.

standalone_confirm_exchange asks the user on the session's standalone GET stream (an
`elicitation/create` not related to the call), then waits for the answer;
`standalone_confirm_exchange:asked` counts the questions.

With --refuse-resume, a GET that resumes a stream (`Last-Event-ID`) is answered 405 and
counted as `resume_refused`, as by a server (or a proxy before it) that offers no resumption:
restream_exchange then closes its stream and its result reaches nobody.

    python upstream.py [--json] [--refuse-resume]
"""

import asyncio
import json
import socket
import sys
from collections import Counter
from typing import Annotated

import uvicorn
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse

from mcp.server import MCPServer
from mcp.types import ToolAnnotations
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.streamable_http import EventMessage, EventStore

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
    try:
        await gate.wait()
    except asyncio.CancelledError:
        counts["cancelled"] += 1
        raise
    return Exchange(
        exchange_id=f"exg_{execution}",
        order_id=order_id,
        item_id=item_id,
        replacement_sku=replacement_sku,
        execution=execution,
    )


@server.tool()
async def restream_exchange(order_id: str, item_id: str, replacement_sku: str, ctx: Context) -> Exchange:
    """Exchange an item, answering on a resumed stream only (needs the user's approval)."""
    counts["restream_exchange"] += 1
    execution = counts["restream_exchange"]
    await ctx.close_sse_stream()
    await gate.wait()
    return Exchange(
        exchange_id=f"exg_s{execution}",
        order_id=order_id,
        item_id=item_id,
        replacement_sku=replacement_sku,
        execution=execution,
    )


class MemoryEventStore(EventStore):
    """Every event of every stream, so that a client can resume one after any event."""

    def __init__(self):
        self.events = []  # (stream_id, event_id, message or None for a priming event)

    async def store_event(self, stream_id, message):
        event_id = f"ev-{len(self.events) + 1}"
        self.events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id, send_callback):
        stream = next((s for s, e, _ in self.events if e == last_event_id), None)
        if stream is None:
            return None
        counts["resumed"] += 1
        after = False
        for stream_id, event_id, message in list(self.events):
            if after and stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream


class Confirmation(BaseModel):
    confirm: bool


def ask_to_confirm(order_id: str) -> Elicit[Confirmation]:
    counts["confirm_exchange:asked"] += 1
    return Elicit(f"Exchange an item of order {order_id}?", Confirmation)


@server.tool()
async def confirm_exchange(
    order_id: str,
    item_id: str,
    replacement_sku: str,
    answer: Annotated[Confirmation, Resolve(ask_to_confirm)],
) -> Exchange:
    """Exchange an item once the user confirmed it (asks them first; needs approval too)."""
    counts["confirm_exchange"] += 1
    execution = counts["confirm_exchange"]
    return Exchange(
        exchange_id=f"exg_c{execution}" if answer.confirm else "declined",
        order_id=order_id,
        item_id=item_id,
        replacement_sku=replacement_sku,
        execution=execution,
    )


@server.tool()
async def standalone_confirm_exchange(
    order_id: str, item_id: str, replacement_sku: str, ctx: Context
) -> Exchange:
    """Exchange an item once the user confirmed it, asked on the GET stream (needs approval)."""
    counts["standalone_confirm_exchange:asked"] += 1
    answer = await ctx.session.elicit_form(
        f"Exchange an item of order {order_id}?",
        {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]},
        related_request_id=None,
    )
    counts["standalone_confirm_exchange"] += 1
    execution = counts["standalone_confirm_exchange"]
    confirmed = answer.action == "accept" and (answer.content or {}).get("confirm") is True
    return Exchange(
        exchange_id=f"exg_g{execution}" if confirmed else "declined",
        order_id=order_id,
        item_id=item_id,
        replacement_sku=replacement_sku,
        execution=execution,
    )


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
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


def counting_cancellations(app):
    """Counts each `notifications/cancelled` POSTed (`cancel_received`) as it is read, before
    the SDK acts on it, so a test knows whether one reached the server."""

    async def counted(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)

        async def peek():
            message = await receive()
            if b"notifications/cancelled" in message.get("body", b""):
                counts["cancel_received"] += 1
            return message

        return await app(scope, peek, send)

    return counted


def refusing_resumption(app):
    """Answers every GET with `Last-Event-ID` 405, as a server without resumption does."""

    async def refusing(scope, receive, send):
        headers = dict(scope.get("headers") or []) if scope["type"] == "http" else {}
        if scope["type"] == "http" and scope["method"] == "GET" and b"last-event-id" in headers:
            counts["resume_refused"] += 1
            response = JSONResponse({"error": "resumption is not supported"}, status_code=405)
            return await response(scope, receive, send)
        return await app(scope, receive, send)

    return refusing


async def main() -> None:
    json_response = "--json" in sys.argv[1:]
    resumable = {} if json_response else {"event_store": MemoryEventStore(), "retry_interval": 100}
    app = counting_cancellations(server.streamable_http_app(json_response=json_response, **resumable))
    if "--refuse-resume" in sys.argv[1:]:
        app = refusing_resumption(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is printed: a client connecting at once is queued, not refused.
    sock.listen(128)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    await uv.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
