"""Check a service's real answers against its OpenAPI description, with openapi-core (the
openapi environment of tests/deps/python).

    python validate.py OPENAPI.json < exchanges.jsonl

First the description itself is validated (openapi-spec-validator, OpenAPI 3.1). Then each
line is one exchange the tests made:
{"method": "POST", "path": "/v1/perform", "request": "<body text>", "request_headers": {...},
 "check_request": true, "status": 200, "headers": {...}, "body": "<body text>"}
Every answer must be described (its path, method and status) and match its schema and
required headers; a request marked `check_request` must match the request schema too. Prints
one line per problem and exits 1 if there was any.
"""

import json
import sys

from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from openapi_spec_validator import validate

with open(sys.argv[1]) as f:
    spec = json.load(f)
validate(spec)
openapi = OpenAPI.from_dict(spec)

problems = 0
checked = 0
for line in sys.stdin:
    if not line.strip():
        continue
    exchange = json.loads(line)
    request = MockRequest(
        "http://localhost",
        exchange["method"].lower(),
        exchange["path"],
        headers=exchange.get("request_headers", {}),
        data=(exchange.get("request") or "").encode(),
        content_type="application/json",
    )
    response = MockResponse(
        data=exchange["body"].encode(),
        status_code=exchange["status"],
        headers=exchange["headers"],
        content_type=exchange["headers"].get("content-type", "application/json"),
    )
    what = f'{exchange["method"]} {exchange["path"]} -> {exchange["status"]}'
    checked += 1
    try:
        if exchange.get("check_request"):
            openapi.validate_request(request)
        openapi.validate_response(request, response)
    except Exception as error:  # every kind of validation error is a finding
        problems += 1
        cause = getattr(error, "__cause__", None)
        print(f"{what}: {type(error).__name__}: {cause or error}; body: {exchange['body'][:300]}")
print(f"checked {checked} exchanges, {problems} problems", file=sys.stderr)
sys.exit(1 if problems else 0)
