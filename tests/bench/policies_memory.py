#!/usr/bin/env python3
"""Idle RSS and a `/metrics` scrape's cost as the policies grow (BENCHMARKS.md, "Scaling
(issue 28)").

    tests/bench/policies_memory.py GATEWAY_BIN [GATEWAY_BIN …] [--counts 1,100,1000,10000]

For each binary and policy count: a fresh gateway (`memory://`) with the bench's policy file
(`count - 1` generated POST policies, then the exchange), its VmRSS 300 ms after `/healthz`
answers, then `--scrapes` sequential `GET /metrics` on the admin listener: the wall time of
one, the gateway's CPU time per scrape (utime + stime from /proc), the exposition's size, and
VmRSS after them. Binaries alternate per count, so both see the same machine.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from held_parts import KEYS, POLICY, free_port, rss_kib  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def policy_file(count):
    out = []
    for i in range(1, count):
        out.append(f'''
[[operation]]
name = "act{i}"
method = "POST"
path = "/orders/{{order_id}}/act{i}"
id_prefix = "a{i}"
expires_in = "15m"
same_action = ["order_id"]
summary = "Action {i} on order {{order_id}}."

[operation.terms]
order_id = {{ path = "order_id" }}
''')
    out.append(POLICY)
    return "".join(out)


def get(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def measure(binary, count, scrapes):
    with tempfile.TemporaryDirectory() as folder:
        os.makedirs(f"{folder}/policies")
        with open(f"{folder}/policies/bench.toml", "w") as f:
            f.write(policy_file(count))
        listen, admin, upstream = free_port(), free_port(), free_port()
        with open(f"{folder}/gateway.toml", "w") as f:
            f.write(f'''policies = ["policies/*.toml"]
[server]
listen = "127.0.0.1:{listen}"
threads = 1
[upstream]
url = "http://127.0.0.1:{upstream}"
[admin]
listen = "127.0.0.1:{admin}"
[store]
url = "memory://"
[session]
verify = "off"
''')
        env = dict(os.environ, POPPY_GATEWAY_KEYS=KEYS, RUST_LOG="warn")
        env.pop("POPPY_GATEWAY_ADMIN_TOKEN", None)
        with open(f"{folder}/gateway.log", "w") as log:
            proc = subprocess.Popen([binary, "--config", f"{folder}/gateway.toml"], env=env,
                                    stdout=log, stderr=log)
        try:
            deadline = time.time() + 120
            while True:
                try:
                    if get(admin, "/healthz")[0] == 200:
                        break
                except OSError:
                    pass
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"gateway did not start: see {folder}/gateway.log")
                time.sleep(0.05)
            time.sleep(0.3)
            idle = rss_kib(proc.pid)
            size = len(get(admin, "/metrics")[1])
            ticks = cpu_ticks(proc.pid)
            started = time.perf_counter()
            for _ in range(scrapes):
                status, _ = get(admin, "/metrics")
                assert status == 200, status
            wall = (time.perf_counter() - started) / scrapes
            cpu = (cpu_ticks(proc.pid) - ticks) / TICKS / scrapes
            return idle, wall, cpu, size, rss_kib(proc.pid)
        finally:
            proc.terminate()
            proc.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("gateways", nargs="+")
    parser.add_argument("--counts", default="1,100,1000,10000")
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| gateway | policies | idle RSS MiB | scrape ms (wall) | scrape CPU ms | "
          "/metrics bytes | RSS after scrapes MiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for count in (int(c) for c in args.counts.split(",")):
        for binary in args.gateways:
            idle, wall, cpu, size, after = measure(binary, count, args.scrapes)
            print(f"| {binary} | {count} | {idle / 1024:.1f} | {wall * 1000:.1f} | "
                  f"{cpu * 1000:.1f} | {size} | {after / 1024:.1f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
