#!/usr/bin/env bash
# What tracing costs a passthrough request, counted in instructions (callgrind), which repeat to
# about 0.1% whatever else the machine does; the CPU-time rows (3, 3t1) vary by more than the
# 5% the issue-41 target allows (BENCHMARKS.md, "Real traffic (issue 41)").
#
#     tests/bench/tracing_instructions.sh [GATEWAY_BIN]
#
# One release gateway (one thread, memory://, verify = "off") in front of an nginx upstream,
# with an nginx OTLP sink answering 200; 1000 and then 5000 keep-alive passthrough POSTs from one
# client; per request = the difference / 4000, so startup and shutdown cancel. Four settings:
# no [tracing], sampling_ratio 0.0, 0.01 and 1.0. Needs valgrind, nginx and python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
target_dir=${CARGO_TARGET_DIR:-target}
bin=${1:-$target_dir/release/poppy-gateway}
[[ -x $bin ]] || cargo build --release -p poppy-gateway
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
work=$(mktemp -d)
trap 'kill $(cat "$work/nginx.pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
upstream=$(free_port) sink=$(free_port)
cat >"$work/nginx.conf" <<EOF
worker_processes 1;
daemon on;
pid $work/nginx.pid;
error_log $work/nginx.err;
events { worker_connections 1024; }
http { access_log off;
  server { listen 127.0.0.1:$upstream; location / { return 200 "ok\n"; } }
  server { listen 127.0.0.1:$sink; location / { return 200 ""; } }
}
EOF
"$nginx_bin" -c "$work/nginx.conf"
mkdir -p "$work/policies"
# One policy the requests do not match: they pass through.
cat >"$work/policies/p.toml" <<'EOF'
[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "x"
expires_in = "15m"
same_action = ["order_id"]
summary = "Exchange on order {order_id}."
[operation.terms]
order_id = { path = "order_id" }
EOF

cat >"$work/client.py" <<'EOF'
import http.client, sys, time
admin, listen, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + 120
while True:
    try:
        c = http.client.HTTPConnection("127.0.0.1", admin, timeout=30)
        c.request("GET", "/healthz"); r = c.getresponse(); r.read()
        if r.status == 200: break
    except OSError:
        pass
    if time.monotonic() > deadline: sys.exit("the gateway did not become healthy")
    time.sleep(0.2)
c = http.client.HTTPConnection("127.0.0.1", listen, timeout=30)
for i in range(n):
    c.request("POST", f"/other/{i}", body=b'{"a":1}', headers={"content-type": "application/json"})
    r = c.getresponse(); r.read()
    if r.status != 200: sys.exit(f"passthrough answered {r.status}")
EOF

# count SETTING N: instructions of one gateway life serving N requests.
count() {
    local ratio=$1 n=$2 listen admin out
    listen=$(free_port) admin=$(free_port) out="$work/cg-$ratio-$n.out"
    {
        printf 'policies = ["%s/policies/*.toml"]\n[server]\nlisten = "127.0.0.1:%s"\nthreads = 1\n' "$work" "$listen"
        printf '[upstream]\nurl = "http://127.0.0.1:%s"\n[admin]\nlisten = "127.0.0.1:%s"\n' "$upstream" "$admin"
        printf '[session]\nverify = "off"\n[store]\nurl = "memory://"\n'
        [[ $ratio == off ]] || printf '[tracing]\nendpoint = "http://127.0.0.1:%s"\nsampling_ratio = %s\n' "$sink" "$ratio"
    } >"$work/gw.toml"
    POPPY_GATEWAY_KEYS=poppy-bench-signing-key-0123456789abcdef RUST_LOG=warn \
        valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" --config "$work/gw.toml" \
        >"$work/gw.log" 2>&1 &
    local pid=$!
    python3 "$work/client.py" "$admin" "$listen" "$n" || { cat "$work/gw.log" >&2; exit 1; }
    kill -TERM "$pid"
    wait "$pid" || true
    sed -n 's/^summary: //p' "$out"
}

echo "| tracing | instructions per passthrough request | x off |"
echo "| --- | ---: | ---: |"
base=
for ratio in off 0.0 0.01 1.0; do
    small=$(count "$ratio" 1000)
    large=$(count "$ratio" 5000)
    per=$(((large - small) / 4000))
    base=${base:-$per}
    printf '| %s | %d | %s |\n' "$ratio" "$per" "$(python3 -c "print(f'{$per/$base:.3f}')")"
done
