"""The lenient API on Flask (Werkzeug's threaded server). See README.md."""
import io
import json
import sys
import threading

from flask import Flask, jsonify, request
from werkzeug.serving import make_server

app = Flask(__name__)
executions = []
lock = threading.Lock()


class MethodOverride:
    """The usual Flask snippet: `_method` (query or form) or X-HTTP-Method-Override on a POST."""

    def __init__(self, wsgi):
        self.wsgi = wsgi

    def __call__(self, environ, start_response):
        if environ["REQUEST_METHOD"] == "POST":
            from werkzeug.wrappers import Request

            # Read the body once and give the app a fresh copy: reading the form here would
            # otherwise leave the app waiting for a body already consumed.
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length > 0 else b""
            environ["wsgi.input"] = io.BytesIO(body)
            req = Request(environ, shallow=False)
            override = (
                environ.get("HTTP_X_HTTP_METHOD_OVERRIDE")
                or req.args.get("_method")
                or (req.form.get("_method") if req.mimetype.endswith("form-urlencoded") else None)
            )
            if override:
                environ["REQUEST_METHOD"] = override.upper()
            environ["wsgi.input"] = io.BytesIO(body)
        return self.wsgi(environ, start_response)


def execute(kind, **terms):
    with lock:
        record = {"framework": "flask", "kind": kind, "execution": len(executions) + 1, **terms}
        executions.append(record)
    return jsonify(record), 201


@app.post("/accounts/<account>/transfers")
def transfer(account):
    data = request.get_json(force=True, silent=True)
    if not isinstance(data, dict):
        data = request.form.to_dict()
    return execute(
        "transfer",
        account=account,
        amount=data.get("amount"),
        to=data.get("to"),
        currency=request.args.get("currency"),
        channel=request.headers.get("X-Channel"),
    )


def form_fields():
    """Every field as Werkzeug's `request.form` reads it (a flat multi-dict: `a[b]` is a name)."""
    return {name: request.form.getlist(name) for name in request.form.keys()}


@app.post("/2010-04-01/Accounts/<account>/Calls.json")
def create_call(account):
    form = request.form
    return execute(
        "create_call",
        account=account,
        to=form.get("To"),
        sender=form.get("From"),
        customer=form.get("Customer[name]"),
        tags=form.getlist("Tags[]"),
        fields=form_fields(),
    )


@app.post("/2010-04-01/Accounts/<account>/Calls/<sid>.json")
def update_call(account, sid):
    return execute(
        "update_call",
        account=account,
        sid=sid,
        status=request.form.get("Status"),
        fields=form_fields(),
    )


@app.post("/v1/checkout/sessions")
def create_checkout_session():
    """A Stripe-like form API: every field as Werkzeug's flat `request.form` reads it."""
    return execute("checkout", fields=form_fields())


@app.delete("/accounts/<account>")
def close(account):
    return execute("close", account=account)


@app.get("/confirm/<code>")
def confirm(code):
    return execute("confirm", code=code)


@app.post("/mcp")
def mcp():
    return execute("mcp", body=request.get_data(as_text=True))


@app.get("/__executions")
def listed():
    with lock:
        return jsonify(executions)


app.wsgi_app = MethodOverride(app.wsgi_app)

if __name__ == "__main__":
    server = make_server("127.0.0.1", 0, app, threaded=True)
    print(f"PORT {server.server_port}", flush=True)
    server.serve_forever()
