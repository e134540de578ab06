#!/usr/bin/env python3
"""What a request in flight holds in the gateway, part by part (BENCHMARKS.md, "Scaling
(issue 28)", "In flight, part by part").

    tests/bench/held_parts.py GATEWAY_BIN [--held 64] [--body 63] [--repeat 1]

Each experiment starts a fresh gateway (`memory://`, the bench's exchange policy, body limit
1 MiB) in front of an upstream written here (asyncio, one thread, it holds every request whose
path contains `/hold-` until told), makes three small approved executions, measures VmRSS, then
puts `--held` connections into one state and measures VmRSS again; the difference per
connection is printed. The states, from least to most:

  idle        a keep-alive connection that made one mint (its 403 read), now idle
  body        a mint whose head and half of its body arrived; the rest never comes
  held        an approved execution held at the upstream (the connection's mint came first)
  pass        a passthrough POST (no Poppy-Session) held at the upstream: pingora's own path
  conn-only   an approved execution whose upstream accepted the connection but never reads
              (a listener nobody serves): the gateway's side of a fresh connection, no answer

The gateway's Python-free parts are the only ones measured: RSS is the gateway process's.
"""

import argparse
import asyncio
import base64
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

POLICY = r'''
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item **{item_id}** on order {order_id} for {replacement_sku}."
ignore = ["$.note"]

[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
replacement_sku = { body = "$.replacement_sku" }
'''
ITEM = '{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}'
KEYS = "poppy-bench-signing-key-0123456789abcdef"


def b64(text):
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


SESSION = (b64('{"alg":"none","typ":"poppy-session+jwt"}') + "."
           + b64('{"sid":"sess_bench","iss":"bench-agent","sub":"user_bench"}') + ".sig")


def body(size):
    if size <= len(ITEM):
        return ITEM.encode()
    pad = size - len(ITEM) - 10
    return (ITEM[:-1] + ',"note":"' + "x" * pad + '"}').encode()


def request(path, payload, agent=True, approval=None, length=None):
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    if agent:
        head += (f"Poppy-Session: {SESSION}\r\nPoppy-Version: 0.4\r\n"
                 'Poppy-Extensions: "operations";v="2"\r\n')
    if approval:
        head += f"Poppy-Approval: {approval}\r\n"
    head += f"Content-Length: {len(payload) if length is None else length}\r\n\r\n"
    return head.encode() + payload


def read_response(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed before a response")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head.split()[1]), rest[:length]


def approval_for(answer):
    op = json.loads(answer)["operation"]
    return f'operation_id="{op["operation_id"]}", revision="{op["revision"]}"'


class Upstream:
    """Answers 201 with a small JSON body; holds `/hold-` paths until released."""

    def __init__(self):
        self.held = 0
        self.loop = asyncio.new_event_loop()
        self.release = None
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
        self.port = sock.getsockname()[1]
        threading.Thread(target=self._run, args=(sock,), daemon=True).start()
        while self.release is None:
            time.sleep(0.01)

    def _run(self, sock):
        asyncio.set_event_loop(self.loop)
        self.release = asyncio.Event()
        server = asyncio.start_server(self._serve, sock=sock)
        self.loop.run_until_complete(server)
        self.loop.run_forever()

    async def _serve(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
                await reader.readexactly(length)
                if b"/hold-" in head.split(b"\r\n", 1)[0]:
                    self.held += 1
                    await self.release.wait()
                    self.held -= 1
                answer = b'{"exchange_id":"exc_1","status":"accepted","item":"itm_4Qa"}'
                writer.write(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                             + f"Content-Length: {len(answer)}\r\n\r\n".encode() + answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    def set_release(self):
        self.loop.call_soon_threadsafe(self.release.set)

    def reset(self):
        self.loop.call_soon_threadsafe(self.release.clear)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def start_gateway(binary, upstream_port, folder):
    os.makedirs(f"{folder}/policies", exist_ok=True)
    with open(f"{folder}/policies/bench.toml", "w") as f:
        f.write(POLICY)
    listen, admin = free_port(), free_port()
    with open(f"{folder}/gateway.toml", "w") as f:
        f.write(f'''policies = ["policies/*.toml"]
[server]
listen = "127.0.0.1:{listen}"
threads = 1
max_body_bytes = 1048576
[upstream]
url = "http://127.0.0.1:{upstream_port}"
[admin]
listen = "127.0.0.1:{admin}"
[store]
url = "memory://"
[session]
verify = "off"
''')
    env = dict(os.environ, POPPY_GATEWAY_KEYS=KEYS, RUST_LOG="warn")
    log = open(f"{folder}/gateway.log", "w")
    proc = subprocess.Popen([binary, "--config", f"{folder}/gateway.toml"], env=env,
                            stdout=log, stderr=log)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", listen), timeout=0.2).close()
            socket.create_connection(("127.0.0.1", admin), timeout=0.2).close()
            return proc, listen
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("gateway did not start")


def connect(port):
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def approve_once(port, order, payload, hold=False):
    """Mint then send the approved request; returns the socket (its answer not read when
    `hold`)."""
    sock = connect(port)
    path = f"/orders/{order}/exchanges"
    sock.sendall(request(path, payload))
    status, answer = read_response(sock)
    assert status == 403, (status, answer)
    sock.sendall(request(path, payload, approval=approval_for(answer)))
    if not hold:
        status, _ = read_response(sock)
        assert status == 201, status
    return sock


def wait_for(predicate, what, seconds=30):
    deadline = time.time() + seconds
    while not predicate():
        if time.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def experiment(binary, kind, held, size, folder):
    upstream = Upstream()
    dead = None
    upstream_port = upstream.port
    if kind == "conn-only":
        # Accepts (the kernel does, from the backlog) but never reads nor answers.
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))
        dead.listen(4096)
        upstream_port = dead.getsockname()[1]
    proc, port = start_gateway(binary, upstream.port if kind != "conn-only" else upstream_port,
                               folder)
    try:
        if kind != "conn-only":
            for i in range(3):
                approve_once(port, f"warm-{i}", body(63)).close()
        else:
            # No upstream answers: warm up with mints only.
            for i in range(3):
                s = connect(port)
                s.sendall(request(f"/orders/warm-{i}/exchanges", body(63)))
                read_response(s)
                s.close()
        time.sleep(0.3)
        before = rss_kib(proc.pid)
        payload = body(size)
        socks = []
        if kind == "idle":
            for i in range(held):
                s = connect(port)
                s.sendall(request(f"/orders/idle-{i}/exchanges", payload))
                status, _ = read_response(s)
                assert status == 403
                socks.append(s)
        elif kind == "body":
            for i in range(held):
                s = connect(port)
                whole = request(f"/orders/body-{i}/exchanges", payload)
                s.sendall(whole[: len(whole) - len(payload) // 2])
                socks.append(s)
        elif kind in ("held", "conn-only"):
            for i in range(held):
                socks.append(approve_once(port, f"hold-{i}", payload, hold=True))
            if kind == "held":
                wait_for(lambda: upstream.held >= held, "the upstream to hold them")
        elif kind == "pass":
            for i in range(held):
                s = connect(port)
                s.sendall(request(f"/orders/hold-{i}/exchanges", payload, agent=False))
                socks.append(s)
            wait_for(lambda: upstream.held >= held, "the upstream to hold them")
        time.sleep(0.5)
        during = rss_kib(proc.pid)
        if kind in ("held", "pass"):
            upstream.set_release()
            for s in socks:
                read_response(s)
        for s in socks:
            s.close()
        return before, during
    finally:
        proc.terminate()
        proc.wait()
        if dead:
            dead.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("gateway")
    parser.add_argument("--held", type=int, default=64)
    parser.add_argument("--body", type=int, action="append")
    parser.add_argument("--kinds", default="idle,body,held,pass,conn-only")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    sizes = args.body or [63]
    print(f"gateway: {args.gateway}; {args.held} connections per state; load average "
          f"{os.getloadavg()[0]:.1f}")
    print("| state | body bytes | RSS before KiB | during KiB | bytes per connection |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for size in sizes:
        for kind in args.kinds.split(","):
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory() as folder:
                    before, during = experiment(args.gateway, kind, args.held, size, folder)
                per = (during - before) * 1024 / args.held
                print(f"| {kind} | {len(body(size))} | {before} | {during} | {per:.0f} |",
                      flush=True)


if __name__ == "__main__":
    sys.exit(main())
