"""A real OAuth resource server on Flask, reading the bearer token where its library does.

    python resource_server.py oauthlib|authlib

`oauthlib`: oauthlib's ResourceEndpoint with BearerToken, called as flask-oauthlib calls it
(the URI with its query, the form fields, the headers): the token from `Authorization` (split
on any Unicode whitespace), else `access_token` in the query or the form body. `authlib`:
Authlib's Flask ResourceProtector with a BearerTokenValidator: the token from `Authorization`
(split on any Unicode whitespace too). Werkzeug decodes header bytes as Latin-1, so a no-break
space (0xA0) or NEL (0x85) byte is whitespace to both.

Every token is accepted (the gateway's test provider signed it; this server only records it):
`POST /pay/<to>` and `/pay-form/<to>` execute and record the token's client and account;
`GET /__executions` lists the executions. Prints `{"port": N}` once listening on a free port.
"""
import base64
import json
import sys
import threading

from flask import Flask, jsonify, request
from werkzeug.serving import make_server

app = Flask(__name__)
executions = []
lock = threading.Lock()
MODE = sys.argv[1]


def claims(token):
    """The JWT's payload, unverified: which client and account the token names."""
    try:
        payload = token.split(".")[1]
        payload += "=" * (-len(payload) % 4)
        return json.loads(base64.urlsafe_b64decode(payload))
    except Exception:  # an opaque token names nobody
        return {}


def execute(to, token):
    named = claims(token)
    with lock:
        record = {
            "server": MODE,
            "execution": len(executions) + 1,
            "to": to,
            "client": named.get("client_id") or named.get("azp"),
            "account": named.get("account"),
        }
        executions.append(record)
    return jsonify(record), 201


if MODE == "oauthlib":
    from oauthlib.oauth2 import BearerToken, RequestValidator, ResourceEndpoint

    class Validator(RequestValidator):
        def validate_bearer_token(self, token, scopes, request):
            request.seen_token = token
            return bool(token)

    endpoint = ResourceEndpoint(
        default_token="Bearer", token_types={"Bearer": BearerToken(Validator())}
    )

    @app.post("/pay/<to>")
    @app.post("/pay-form/<to>")
    def pay(to):
        valid, oauth_request = endpoint.verify_request(
            request.url, request.method, request.form.to_dict(), dict(request.headers), []
        )
        if not valid:
            return jsonify(error="invalid_token"), 401
        return execute(to, oauth_request.seen_token)

elif MODE == "authlib":
    from authlib.integrations.flask_oauth2 import ResourceProtector, current_token
    from authlib.oauth2.rfc6750 import BearerTokenValidator

    class Token(dict):
        def is_expired(self):
            return False

        def is_revoked(self):
            return False

        def get_scope(self):
            return "shop"

    class Validator(BearerTokenValidator):
        def authenticate_token(self, token_string):
            return Token(token=token_string)

    require_oauth = ResourceProtector()
    require_oauth.register_token_validator(Validator())

    @app.post("/pay/<to>")
    @app.post("/pay-form/<to>")
    @require_oauth()
    def pay(to):
        return execute(to, current_token["token"])

else:
    sys.exit(f"unknown mode {MODE!r}")


@app.get("/__executions")
def listed():
    with lock:
        return jsonify(list(executions))


server = make_server("127.0.0.1", 0, app, threaded=True)
print(json.dumps({"port": server.socket.getsockname()[1]}), flush=True)
server.serve_forever()
