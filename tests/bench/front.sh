#!/usr/bin/env bash
# What TLS and HTTP/2 cost the gateway: the same passthrough GET and the same mint (403) over
# cleartext HTTP/1.1, h2c, TLS with HTTP/1.1 and TLS with HTTP/2 (ALPN), driven by h2load
# (nghttp2-client; it speaks all four), 32 kept-alive connections, one stream each. The gateway
# (1 thread, memory://) is pinned to CPU 0, the upstream and h2load to CPU 1, as in poppy-bench;
# the figure is the gateway's CPU time (utime + stime from /proc) per request.
#
#     tests/bench/front.sh                 # 10 s per row, release binaries in target/release
#     DURATION=5 ROUNDS=3 tests/bench/front.sh
#
# Needs: h2load (apt-get install nghttp2-client), openssl, taskset, curl, python3, and
# `cargo build --release -p poppy-gateway -p poppy-bench`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
TARGET=${CARGO_TARGET_DIR:-target}/release
GATEWAY=${GATEWAY:-$TARGET/poppy-gateway}
BENCH=${BENCH:-$TARGET/poppy-bench}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-2}
for tool in h2load openssl taskset curl python3; do
    command -v "$tool" >/dev/null || { echo "front.sh: $tool is missing (apt-get install nghttp2-client for h2load)" >&2; exit 1; }
done
for bin in "$GATEWAY" "$BENCH"; do
    [ -x "$bin" ] || { echo "front.sh: $bin is missing: cargo build --release -p poppy-gateway -p poppy-bench" >&2; exit 1; }
done
GATEWAY=$(realpath "$GATEWAY")
BENCH=$(realpath "$BENCH")
DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$DIR"' EXIT
mkdir -p "$DIR/policies"
sed -n '/^\[\[operation\]\]/,/^"#;/p' tests/bench/src/gateway.rs | sed '$d' > "$DIR/policies/bench.toml"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$DIR/key.pem" -out "$DIR/cert.pem" -subj /CN=localhost 2>/dev/null
printf '%s' '{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}' > "$DIR/body.json"
SESSION=$(python3 -c 'import base64
b=lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("=")
print(b("{\"alg\":\"none\",\"typ\":\"poppy-session+jwt\"}")+"."+b("{\"sid\":\"sess_bench\",\"iss\":\"bench-agent\",\"sub\":\"user_bench\"}")+".sig")')
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# One row: MODE (plain | h2c | tls1 | tls2), WHAT (get | mint). Prints "req/s cpu_us".
row() {
    local mode=$1 what=$2 up gw admin scheme=http extra="" flags=()
    up=$(free_port); gw=$(free_port); admin=$(free_port)
    taskset -c 1 "$BENCH" upstream --port "$up" >"$DIR/upstream.log" 2>&1 &
    local upstream_pid=$!
    case $mode in
        h2c) extra='h2c = true' ;;
        tls1 | tls2) extra=$'[server.tls]\ncert_file = "cert.pem"\nkey_file = "key.pem"'; scheme=https ;;
    esac
    case $mode in plain | tls1) flags+=(--h1) ;; esac
    cat >"$DIR/gateway.toml" <<TOML
policies = ["policies/*.toml"]
[server]
listen = "127.0.0.1:$gw"
threads = 1
$extra
[upstream]
url = "http://127.0.0.1:$up"
[admin]
listen = "127.0.0.1:$admin"
[store]
url = "memory://"
[session]
verify = "off"
TOML
    (cd "$DIR" && POPPY_GATEWAY_KEYS=poppy-bench-signing-key-0123456789abcdef RUST_LOG=warn \
        exec taskset -c 0 "$GATEWAY" --config gateway.toml >gateway.log 2>&1) &
    local gateway_pid=$!
    for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$admin/healthz" && break; sleep 0.1; done
    local url="$scheme://127.0.0.1:$gw/orders/ord_bench"
    if [ "$what" = mint ]; then
        url="$url/exchanges"
        flags+=(-d "$DIR/body.json" -H "poppy-session: $SESSION" -H "poppy-version: 0.4"
            -H 'poppy-extensions: "operations";v="2"' -H "content-type: application/json")
    fi
    taskset -c 1 h2load "${flags[@]}" -c 32 -m 1 -D 2 "$url" >/dev/null 2>&1
    local before after
    before=$(awk '{print $14 + $15}' "/proc/$gateway_pid/stat")
    taskset -c 1 h2load "${flags[@]}" -c 32 -m 1 -D "$DURATION" "$url" >"$DIR/load.txt" 2>&1
    after=$(awk '{print $14 + $15}' "/proc/$gateway_pid/stat")
    kill "$gateway_pid" "$upstream_pid"; wait "$gateway_pid" "$upstream_pid" 2>/dev/null || true
    local expected=2xx; [ "$what" = mint ] && expected=4xx
    local answered; answered=$(grep -o "[0-9]* $expected" "$DIR/load.txt" | head -1 | awk '{print $1}')
    python3 -c "print(f'{$answered / $DURATION:.0f} {($after - $before) / $(getconf CLK_TCK) * 1e6 / $answered:.1f}')"
}

printf '%-6s %-5s %s\n' what mode "req/s and CPU µs/request of the gateway, per round"
for what in get mint; do
    for mode in plain h2c tls1 tls2; do
        results=()
        for _ in $(seq "$ROUNDS"); do results+=("$(row "$mode" "$what")"); done
        printf '%-6s %-5s %s\n' "$what" "$mode" "$(printf '%s | ' "${results[@]}")"
    done
done
