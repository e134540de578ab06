"""The lenient API on Starlette, served by uvicorn. See README.md."""
import json
import socket
import sys
import threading
from urllib.parse import parse_qsl

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

executions = []
lock = threading.Lock()


def execute(kind, **terms):
    with lock:
        record = {"framework": "starlette", "kind": kind, "execution": len(executions) + 1, **terms}
        executions.append(record)
    return JSONResponse(record, status_code=201)


async def body_fields(request):
    raw = await request.body()
    try:
        data = json.loads(raw)
    except ValueError:
        data = dict(parse_qsl(raw.decode("utf-8", "replace")))
    return data if isinstance(data, dict) else {}


async def transfer(request):
    data = await body_fields(request)
    return execute(
        "transfer",
        account=request.path_params["account"],
        amount=data.get("amount"),
        to=data.get("to"),
        currency=request.query_params.get("currency"),
        channel=request.headers.get("x-channel"),
    )


async def form_fields(request):
    """Every field as Starlette's `request.form()` reads it (python-multipart; `a[b]` is a name)."""
    form = await request.form()
    return form, {name: form.getlist(name) for name in form.keys()}


async def create_call(request):
    form, fields = await form_fields(request)
    return execute(
        "create_call",
        account=request.path_params["account"],
        to=form.get("To"),
        sender=form.get("From"),
        customer=form.get("Customer[name]"),
        tags=form.getlist("Tags[]"),
        fields=fields,
    )


async def update_call(request):
    form, fields = await form_fields(request)
    return execute(
        "update_call",
        account=request.path_params["account"],
        sid=request.path_params["sid"],
        status=form.get("Status"),
        fields=fields,
    )


async def create_checkout_session(request):
    """A Stripe-like form API: every field as Starlette's flat `request.form()` reads it."""
    _, fields = await form_fields(request)
    return execute("checkout", fields=fields)


async def close(request):
    return execute("close", account=request.path_params["account"])


async def confirm(request):
    return execute("confirm", code=request.path_params["code"])


async def mcp(request):
    return execute("mcp", body=(await request.body()).decode("utf-8", "replace"))


async def listed(request):
    with lock:
        return JSONResponse(list(executions))


class MethodOverride:
    """ASGI middleware honouring `_method` (query) and X-HTTP-Method-Override on a POST."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            query = dict(parse_qsl(scope.get("query_string", b"").decode()))
            override = headers.get("x-http-method-override") or query.get("_method")
            if override:
                scope = dict(scope, method=override.upper())
        await self.app(scope, receive, send)


app = MethodOverride(
    Starlette(
        routes=[
            Route("/accounts/{account}/transfers", transfer, methods=["POST"]),
            Route("/2010-04-01/Accounts/{account}/Calls.json", create_call, methods=["POST"]),
            Route("/2010-04-01/Accounts/{account}/Calls/{sid}.json", update_call, methods=["POST"]),
            Route("/v1/checkout/sessions", create_checkout_session, methods=["POST"]),
            Route("/accounts/{account}", close, methods=["DELETE"]),
            Route("/confirm/{code}", confirm, methods=["GET"]),
            Route("/mcp", mcp, methods=["POST"]),
            Route("/__executions", listed, methods=["GET"]),
        ]
    )
)

if __name__ == "__main__":
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])
