"""A Company's webhook receiver for tests/tests/webhook.rs: verifies every delivery with the
Standard Webhooks reference library (`standardwebhooks`, pinned in
tests/deps/python/webhook), records each attempt as one JSON line in the file named by
--record, and answers 500 to the first --fail-first attempts of each event, 200 after.

    receiver.py --secret whsec_... --record attempts.jsonl [--fail-first N]

Listens on a free loopback port and prints {"port": N} once it does.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--secret", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--fail-first", type=int, default=0)
    args = parser.parse_args()
    webhook = Webhook(args.secret)
    lock = threading.Lock()
    attempts: dict[str, int] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            length = int(self.headers.get("content-length", "0"))
            raw = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                webhook.verify(raw, headers)
                verified, error = True, None
            except WebhookVerificationError as e:
                verified, error = False, str(e)
            event_id = headers.get("webhook-id", "")
            with lock:
                attempts[event_id] = attempts.get(event_id, 0) + 1
                attempt = attempts[event_id]
                if not verified:
                    status = 401
                elif attempt <= args.fail_first:
                    status = 500
                else:
                    status = 200
                line = {
                    "id": event_id,
                    "attempt": attempt,
                    "verified": verified,
                    "error": error,
                    "status": status,
                    "headers": headers,
                    "body": raw.decode("utf-8", "replace"),
                }
                with open(args.record, "a", encoding="utf-8") as record:
                    record.write(json.dumps(line) + "\n")
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
