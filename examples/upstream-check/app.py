"""An upstream that checks what was approved (docs/upstream-check.md).

The gateway, with `[upstream.approval_header]`, sends every approved execution with a header
(`Poppy-Approved` by default): a compact JWS, EdDSA, of the operation, its revision, the
approved terms, the policy and the request line. This shop verifies it with the gateway's
public key, and charges only the price the User approved: if its price changed after the
approval's lookup, it refuses (409), and the gateway records that answer as the operation's
outcome. It never charges one operation twice (the token's `jti` is the operation ID).

    python app.py --public-key approval-header.pub.pem [--port 0] [--header poppy-approved]

It prints `PORT n` once listening. Endpoints:
  GET  /catalog/<sku>               the price (the gateway's lookup reads it)
  PUT  /catalog/<sku>               {"price": "99.00", "after_reads": 1}: change the price, after
                                    that many more reads of it (to try the race between the
                                    approval's lookup and the forward)
  POST /orders/<order_id>/exchanges {"replacement_sku": "s1"}: charge, only as approved
  GET  /orders/<order_id>           anything else (passthrough: no header expected)
  GET  /log                         what it saw: each request's approval header and verdict
"""

import argparse
import sys
import threading

import jwt
from flask import Flask, jsonify, request
from werkzeug.serving import make_server

TYP = "poppy-approved+jwt"

app = Flask(__name__)
lock = threading.Lock()
prices = {"s1": "10.00", "s2": "25.00"}
scheduled = {}  # sku -> [reads left, new price]
charged = set()  # operation IDs already charged
log = []
settings = {}


def note(verdict, claims=None):
    """Remember a request: what it carried and what this upstream made of it."""
    with lock:
        log.append(
            {
                "method": request.method,
                "path": raw_target(),
                "header": request.headers.get(settings["header"]),
                "verdict": verdict,
                "claims": claims,
            }
        )


def raw_target():
    """The request's path and query as sent (what the token's `path` signs)."""
    return request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI") or request.full_path


def verify():
    """The approval's claims, or why there are none."""
    token = request.headers.get(settings["header"])
    if token is None:
        return None, "no approval header: not an approved execution"
    try:
        if jwt.get_unverified_header(token).get("typ") != TYP:
            return None, f"not a {TYP}"
        claims = jwt.decode(
            token,
            settings["public_key"],
            algorithms=["EdDSA"],
            options={"require": ["exp", "iat", "jti"]},
            leeway=5,
        )
    except jwt.InvalidTokenError as e:
        return None, f"invalid approval header: {e}"
    if claims.get("method") != request.method or claims.get("path") != raw_target():
        return None, "the approval is for another request"
    return claims, None


@app.get("/catalog/<sku>")
def catalog(sku):
    with lock:
        price = prices.get(sku)
        change = scheduled.get(sku)
        if change is not None:
            change[0] -= 1
            if change[0] <= 0:
                prices[sku] = change[1]
                del scheduled[sku]
    note("lookup")
    if price is None:
        return jsonify(error="unknown_sku"), 404
    return jsonify(sku=sku, price=price)


@app.put("/catalog/<sku>")
def set_price(sku):
    body = request.get_json(force=True)
    with lock:
        scheduled[sku] = [int(body.get("after_reads", 0)), str(body["price"])]
        if scheduled[sku][0] <= 0:
            prices[sku] = scheduled.pop(sku)[1]
    return jsonify(sku=sku, scheduled=body)


@app.post("/orders/<order_id>/exchanges")
def exchange(order_id):
    claims, problem = verify()
    if problem is not None:
        note(problem)
        return jsonify(error="approval_not_verified", detail=problem), 403
    sku = (request.get_json(silent=True) or {}).get("replacement_sku")
    approved = claims["terms"].get("price")
    with lock:
        price = prices.get(sku)
        if claims["jti"] in charged:
            verdict = "already charged"
        elif approved != price:
            verdict = "price changed"
        else:
            verdict = "charged"
            charged.add(claims["jti"])
    note(verdict, claims)
    if verdict == "already charged":
        return jsonify(error="already_charged", operation_id=claims["jti"]), 409
    if verdict == "price changed":
        detail = f"the approved price was {approved}, the price is now {price}: nothing was charged"
        return jsonify(error="price_changed", detail=detail, approved=approved, price=price), 409
    return jsonify(order_id=order_id, sku=sku, charged=price, operation_id=claims["jti"]), 201


@app.get("/orders/<order_id>")
def order(order_id):
    note("passthrough")
    return jsonify(order_id=order_id)


@app.get("/log")
def seen():
    with lock:
        return jsonify(log)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--public-key", required=True, help="the gateway's public key, PEM")
    parser.add_argument("--header", default="poppy-approved")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with open(args.public_key, "rb") as f:
        settings["public_key"] = f.read()
    settings["header"] = args.header
    server = make_server("127.0.0.1", args.port, app, threaded=True)
    print(f"PORT {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
