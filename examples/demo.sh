#!/usr/bin/env bash
# The demo: the example shop (a legacy API that knows nothing of approvals) on 127.0.0.1:9000,
# and poppy-gateway in front of it on 127.0.0.1:8080 (admin on :9100), with the embedded
# memory store. Ctrl-C stops both. The README walks the flow with curl against it.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet -p shop -p poppy-gateway -p agent

target/debug/shop --listen 127.0.0.1:9000 &
shop=$!
trap 'kill "$shop" 2>/dev/null || true' EXIT INT TERM

echo "gateway on http://127.0.0.1:8080 -> shop on http://127.0.0.1:9000 (admin http://127.0.0.1:9100)" >&2
target/debug/poppy-gateway --config examples/shop/gateway.toml
