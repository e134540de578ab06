"""An OTLP/HTTP trace receiver for the tests: decodes each POST /v1/traces with the official
OpenTelemetry protobuf definitions (opentelemetry-proto) and appends one JSON line per span to
the file named by --out (hex IDs, attributes as a flat object, links, the resource's
service.name). With --discard it decodes and counts only (the benchmark's sink).

Prints {"port": N} on its first line (it binds port 0: a free port). GET /count answers
{"requests": N, "spans": N}. --refuse answers every export 503 (a collector that is down but
listening).
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

lock = threading.Lock()
counts = {"requests": 0, "spans": 0}


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value_of(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def attributes(kvs):
    return {kv.key: value_of(kv.value) for kv in kvs}


def span_json(span, service):
    return {
        "service": service,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "trace_state": span.trace_state,
        "name": span.name,
        "kind": Span.SpanKind.Name(span.kind),
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
        "attributes": attributes(span.attributes),
        "events": [
            {"name": e.name, "attributes": attributes(e.attributes)} for e in span.events
        ],
        "links": [
            {
                "trace_id": link.trace_id.hex(),
                "span_id": link.span_id.hex(),
                "attributes": attributes(link.attributes),
            }
            for link in span.links
        ],
        "status": {"code": span.status.code, "message": span.status.message},
    }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        if self.server.refuse:
            self.send_response(503)
            self.end_headers()
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        lines = []
        for resource_spans in request.resource_spans:
            service = attributes(resource_spans.resource.attributes).get("service.name")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(span_json(span, service))
        with lock:
            counts["requests"] += 1
            counts["spans"] += len(lines)
            if self.server.out is not None:
                for line in lines:
                    self.server.out.write(json.dumps(line) + "\n")
                self.server.out.flush()
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self):
        with lock:
            answer = json.dumps(counts).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", help="append each span as a JSON line here")
    parser.add_argument("--discard", action="store_true", help="decode and count only")
    parser.add_argument("--refuse", action="store_true", help="answer every export 503")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.refuse = args.refuse
    server.out = None if args.discard or not args.out else open(args.out, "a", encoding="utf-8")
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
